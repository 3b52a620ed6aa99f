"""The dashboard's routes and `autotune report`, in-process, on stored studies (no JAX).

Studies are written through the real store (SQLite; the route test runs on
PostgreSQL too) and read through Starlette's test client, so every route,
template and escape runs as it does under `autotune dashboard`. The tests in a
real browser, over a real study, are in test_dashboard_browser.py.
"""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path
from typing import Any

import outcomes
import pytest
from cli_runner import invoke
from starlette.testclient import TestClient

from autotune import __version__
from autotune.dashboard.app import create_app, routes
from autotune.ground.records import (
    Environment,
    Measurement,
    OutcomeKind,
    Role,
    TrialOutcome,
)
from autotune.storage import Store

FAST = "xla_cpu_enable_fast_math"
PASSES = "xla_disable_hlo_passes"
EVIL = "<script>window.pwned=1</script>"
HOST = Environment("host-a", "3.11", "0.10.2", "0.10.2", "cpu", "cpu", 1)


def paired(ratio: float, fingerprint: str, n: int = 6) -> Measurement:
    return outcomes.paired(ratio, baseline=tuple(1e-3 * (1 + 0.01 * i) for i in range(n)),
                           compile_time_s=0.4, fingerprint=fingerprint, baseline_fingerprint="base",
                           peak_memory_bytes=66_000, memory_source="memory_analysis",
                           hlo_stats={"all-reduce": 2, "fusion": 5}, backend="cpu",
                           device_kind="cpu", device_count=1)


def fill(store: Store, name: str, *, evil: bool = False, first: float = 0.8) -> None:
    """A study: baseline, three search trials (one with an HTML flag value and message),
    a failure, and four confirmation rounds that make trial 1 confirmed faster (at 0.8;
    its search process at `first`)."""
    store.ensure_study(name, "cpu", "matmul", "tiny", 1, "paired")
    ok = OutcomeKind.OK

    def run(trial: int, role: Role, flags: dict[str, Any], outcome: TrialOutcome,
            ratio: float | None = None) -> None:
        store.record_run(name, trial, role, flags, {"XLA_FLAGS": "--x"}, outcome, HOST,
                         ratio=ratio, env_key="host-a")

    run(0, Role.BASELINE, {}, TrialOutcome(ok, "", paired(1.0, "base")))
    run(1, Role.SEARCH, {FAST: True}, TrialOutcome(ok, "", paired(first, "fast")))
    odd = {PASSES: EVIL} if evil else {PASSES: "rematerialization"}
    run(2, Role.SEARCH, odd, TrialOutcome(ok, EVIL if evil else "", paired(0.95, "passes"),
                                          stderr_tail=EVIL if evil else "log"))
    run(3, Role.SEARCH, {"xla_backend_optimization_level": 0},
        TrialOutcome(OutcomeKind.TIMEOUT, EVIL if evil else "timed out after 60 s"))
    for _ in range(4):
        run(1, Role.CONFIRM, {FAST: True}, TrialOutcome(ok, "", paired(0.8, "fast")))


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'autotune.db'}"
    with Store.open(url) as store:
        fill(store, "s")
        fill(store, "t")
        fill(store, EVIL, evil=True)
    return url


@pytest.fixture
def client(db: str) -> TestClient:
    return TestClient(create_app(Store.open(db, upgrade=False), refresh_s=0))


def test_every_page_answers_on_sqlite_and_postgresql(url: str):
    with Store.open(url) as store:
        fill(store, "s")
        fill(store, "t")
    app = create_app(Store.open(url, upgrade=False))
    with TestClient(app) as c:
        for path in ("/", "/study/s", "/study/s/trial/1", "/study/s/compare/1/2",
                     "/compare?a=s&b=t", "/study/s/export.yaml", "/study/s/trial/2/export.env",
                     "/api/studies", "/api/study/s", "/api/study/s/version",
                     "/api/study/s/trial/1", "/runs/s", "/api/runs/s?outcome=timeout",
                     "/static/plotly.min.js", "/static/dashboard.js"):
            assert c.get(path).status_code == 200, path


def test_the_study_page_shows_the_read_model(client: TestClient):
    rec = client.get("/api/study/s").json()["recommendation"]
    assert rec["trial"] == 1 and rec["recommended"] and rec["speedup"] == pytest.approx(1.25)
    low, high = rec["interval"]
    html = client.get("/study/s").text
    assert f"apply trial 1: ×1.250 [{low:.3f}, {high:.3f}] faster than XLA's defaults" in html
    assert f"<code>{FAST}=true</code>" in html
    assert '<tr data-trial="1" data-rank="1" class="recommended">' in html
    assert "<b>timeout</b>: 1 run" in html and "timed out after 60 s" in html
    assert "host-a: cpu x1, jax 0.10.2" in html
    assert ">None<" not in html and "None</" not in html  # a missing value is never "None"


def test_every_run_is_reachable_page_by_page_and_by_filter(tmp_path: Path):
    """A study of 250 search runs: the runs page lists them 100 a page in the order they
    ran, each linked to its trial, the JSON is `trials --format json`'s rows, and role,
    outcome and flag filters narrow it; pruned runs are counted apart from failures."""
    url = f"sqlite:///{tmp_path / 'many.db'}"
    with Store.open(url) as store:
        fill(store, "big")
        for n in range(4, 254):
            kind = OutcomeKind.PRUNED if n % 5 == 0 else OutcomeKind.OK
            store.record_run("big", n, Role.SEARCH, {"xla_cpu_prefer_vector_width": n}, {},
                             TrialOutcome(kind, "", paired(0.99, f"p{n}")), HOST,
                             ratio=0.99, env_key="host-a")
    with TestClient(create_app(Store.open(url, upgrade=False), refresh_s=0)) as c:
        first = c.get("/api/runs/big").json()
        assert (first["total"], first["matched"], first["pages"]) == (258, 258, 3)
        assert [r["trial"] for r in first["rows"][:4]] == [0, 1, 2, 3]
        last = c.get("/api/runs/big?page=9").json()  # clamped to the last page
        assert last["page"] == 3 and [r["trial"] for r in last["rows"]][-1] == 253
        assert len(last["rows"]) == 58
        with Store.open(url, upgrade=False) as store:
            from autotune.results.table import trial_rows
            assert c.get("/api/runs/big?page=3").json()["rows"] == json.loads(
                json.dumps(trial_rows(store.runs("big"))[200:]))
        pruned = c.get("/api/runs/big?outcome=pruned").json()
        assert pruned["matched"] == 50 and {r["outcome"] for r in pruned["rows"]} == {"pruned"}
        narrow = c.get("/api/runs/big?role=search&flag=vector_width=25").json()
        assert sorted(r["trial"] for r in narrow["rows"]) == [25, *range(250, 254)]
        # as the views print flags: `true`, as XLA_FLAGS writes it (fill's trial 1)
        fast = c.get(f"/api/runs/big?flag={FAST}=true").json()
        assert {r["trial"] for r in fast["rows"]} == {1}
        html = c.get("/runs/big?outcome=ok&page=2").text
        assert "207 of 258 runs, page 2 of 3." in html
        assert '<a href="/study/big/trial/151">151</a>' in html
        assert 'href="?outcome=ok&amp;page=3"' in html  # the pages keep the filter
        assert "<option value=\"pruned\">pruned (50)</option>" in html
        study = c.get("/study/big").text
        assert "1 failed runs, 50 stopped by a rule" in study  # the timeout; pruned apart
        assert '<a id="all-runs" href="/runs/big">all 258 runs</a>' in study
        assert c.get("/api/runs/big?page=x").status_code == 404
        assert c.get("/runs/nothing").status_code == 404


def test_a_trial_page_shows_flags_env_steps_memory_collectives_and_logs(client: TestClient):
    html = client.get("/study/s/trial/1").text
    assert '<code id="xla-flags">--xla_cpu_enable_fast_math=true</code>' in html
    assert "64.5 KiB (from memory_analysis)" in html
    assert '<span class="stat">all-reduce: 2</span>' in html
    assert html.count('class="chart steps"') == 5  # the search run and four confirm runs
    data = client.get("/api/study/s/trial/1").json()
    assert len(data["runs"][0]["baseline_step_times_s"]) == 6


def test_comparisons_show_the_diff_and_the_program(client: TestClient):
    html = client.get("/study/s/compare/1/2").text
    assert "They compiled to different programs." in html
    assert f"<td><code>{FAST}</code></td><td><code>true</code></td>" in html
    # trial 2 leaves fast math at XLA's default: the value is named
    assert "<td><code>false (XLA&#39;s default)</code></td>" in html
    # trial 1 leaves the passes at XLA's default, the empty list: said so, not left blank
    assert "<td><code>empty (XLA&#39;s default)</code></td>" in html
    assert '<td class="claimed">×1.250 [' in html and "] faster</td>" in html
    assert '<td class="claimed">not confirmed</td>' in html
    studies = client.get("/compare?a=s&b=t").text
    assert "where it was tuned): <b>holds</b> on B: ×1.250" in studies
    assert f'<code id="winner_a_on_b-flags">--{FAST}=true</code>' in studies


def test_outside_text_is_escaped_everywhere(client: TestClient):
    from urllib.parse import quote

    seg = quote(EVIL, safe="")
    for path in ("/", f"/study/{seg}", f"/study/{seg}/trial/2", f"/study/{seg}/compare/1/2",
                 f"/compare?a={seg}&b=s", f"/study/{seg}/trial/99", f"/study/{seg}x"):
        html = client.get(path).text
        assert EVIL not in html, path
        assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in html, path


def test_a_study_pages_poll_url_is_its_name_encoded(client: TestClient):
    """A name with `?`, `#` or `/` polled the wrong URL (`/api/study/a` for `a?b`)."""
    from urllib.parse import quote

    seg = quote(EVIL, safe="")
    for path in (f"/study/{seg}", f"/study/{seg}/trial/2"):
        poll = re.search(r'data-poll="([^"]*)"', client.get(path).text)
        assert poll is not None and poll.group(1) == f"/api/study/{seg}/version", path
        assert client.get(poll.group(1)).json().keys() == {"version"}


def test_every_response_carries_the_security_headers(client: TestClient):
    from autotune.dashboard.app import SECURITY_HEADERS

    for path in ("/", "/study/s", "/api/study/s", "/static/dashboard.js",
                 "/static/plotly.min.js", "/study/nope", "/study/s/export.yaml"):
        headers = client.get(path).headers
        for name, value in SECURITY_HEADERS:
            assert headers[name.decode()] == value.decode(), (path, name)
    policy = dict(SECURITY_HEADERS)[b"content-security-policy"].decode()
    assert "http" not in policy and "*" not in policy  # this server's own origin alone
    assert "script-src 'self';" in policy  # no inline script, no eval


def test_pages_hold_no_inline_script_and_charts_no_cloud_link():
    """The policy forbids inline scripts: the templates have no handler attribute and no
    script element with code (the offline report inlines its own, and is never served)."""
    templates = Path(__file__).resolve().parents[1] / "autotune/dashboard/templates"
    for page in templates.glob("*.html"):
        text = page.read_text()
        assert not re.search(r"\son[a-z]+=", text), page.name
        served = text.split("{% if offline %}")[0] if "base.html" in page.name else text
        assert not re.search(r"<script>(?!{{)", served), page.name
    js = (templates.parent / "static/dashboard.js").read_text()
    for option in ("showLink: false", "showSendToCloud: false", "showEditInChartStudio: false",
                   "displaylogo: false"):
        assert option in js


def test_a_host_other_than_the_served_ones_is_refused(db: str):
    from autotune.cli.dashboard import served_hosts

    hosts = served_hosts("127.0.0.1", ["tune.example.org"])
    assert hosts == ["127.0.0.1", "localhost", "::1", "tune.example.org", "[::1]"]
    assert served_hosts("10.1.2.3", []) == ["10.1.2.3"]
    assert {"127.0.0.1", "localhost"} <= set(served_hosts("0.0.0.0", []))
    app = create_app(Store.open(db, upgrade=False), refresh_s=0, allowed_hosts=hosts)
    with TestClient(app, base_url="http://attacker.example:8080") as c:
        assert c.get("/api/studies").status_code == 400  # DNS rebinding: refused
    for base in ("http://127.0.0.1:8080", "http://localhost:8080", "http://[::1]:8080",
                 "http://tune.example.org"):
        with TestClient(app, base_url=base) as c:
            assert c.get("/api/studies").status_code == 200, base


def test_a_missing_study_or_trial_is_a_404_page_with_a_link_back(client: TestClient):
    for path, words in (("/study/nope", "no study called &#39;nope&#39;"),
                        ("/study/s/trial/42", "study &#39;s&#39; has no trial 42"),
                        ("/study/s/compare/1/42", "has no trial 42"),
                        ("/compare?a=s&b=nope", "no study called &#39;nope&#39;"),
                        ("/compare?a=s", "name the two studies"),
                        ("/study/s/export.xml", "no export format"),
                        ("/study/s/trial/3/export.yaml", "trial 3")):
        response = client.get(path)
        assert response.status_code == 404, path
        assert words in response.text, path
        assert '<a id="back" href="/">Back to the studies</a>' in response.text
    assert client.get("/api/study/nope").json() == {"error": "no study called 'nope' in this "
                                                             "database"}


def test_no_route_writes(client: TestClient, db: str):
    """Every route answers GET (and HEAD) only; the database is byte-identical after."""
    before = Path(db.removeprefix("sqlite:///")).read_bytes()
    paths = ["/", "/study/s", "/study/s/trial/1", "/study/s/compare/1/2", "/compare?a=s&b=t",
             "/study/s/export.yaml", "/study/s/trial/1/export.json", "/api/studies",
             "/api/study/s", "/api/study/s/version", "/api/study/s/trial/1", "/api/version"]
    for route in routes():
        assert getattr(route, "methods", None) in (None, {"GET", "HEAD"}), route.path
    for path in paths:
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            response = client.request(method, path)
            assert response.status_code == 405, (method, path)
    assert Path(db.removeprefix("sqlite:///")).read_bytes() == before


def test_a_download_is_byte_identical_to_autotune_export(client: TestClient, db: str,
                                                         tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")
    for fmt in ("yaml", "json", "env", "jax"):
        for path, args in ((f"/study/s/export.{fmt}", []),
                           (f"/study/s/trial/2/export.{fmt}", ["--trial", "2"])):
            target = tmp_path / f"out.{fmt}"
            result = invoke("export", "s", "--storage", db, "--format", fmt, "-o", str(target),
                            *args, cwd=tmp_path)
            assert result.exit_code == 0, result.output
            assert client.get(path).content == target.read_bytes(), path


def test_a_polling_page_starts_from_the_version_it_shows(client: TestClient, db: str):
    """Each page that polls carries the version it was computed at (`data-version`): a
    page that learned it from its first poll never showed a run stored between its
    rendering and that poll (the browser test's page stuck on a study's last change)."""
    pages = {"/": "/api/version", "/study/s": "/api/study/s/version",
             "/study/s/trial/2": "/api/study/s/version", "/runs/s": "/api/study/s/version"}

    def shown() -> dict[str, str]:
        found = {}
        for path in pages:
            version = re.search(r'data-version="([^"]*)"', client.get(path).text)
            assert version is not None, path
            found[path] = version.group(1)
        return found

    before = shown()
    for path, api in pages.items():
        assert before[path] == client.get(api).json()["version"], path
    with Store.open(db) as store:
        store.record_run("s", 4, Role.SEARCH, {FAST: False}, {},
                         TrialOutcome(OutcomeKind.OK, "", paired(1.0, "base")), HOST)
    for path, api in pages.items():  # an open page's poll now sees another version
        assert client.get(api).json()["version"] != before[path], path
    assert shown() == {path: client.get(api).json()["version"] for path, api in pages.items()}


def test_the_version_changes_when_a_run_is_stored(client: TestClient, db: str):
    before = client.get("/api/study/s/version").json()["version"]
    assert client.get("/api/study/s/version").json()["version"] == before
    with Store.open(db) as store:
        store.record_run("s", 4, Role.SEARCH, {FAST: False}, {},
                         TrialOutcome(OutcomeKind.OK, "", paired(1.0, "base")), HOST)
    assert client.get("/api/study/s/version").json()["version"] != before
    assert client.get("/api/study/s").json()["summary"]["trials"] == 5
    reader = client.app.state.reader  # type: ignore[attr-defined]
    with Store.open(db) as store:  # read again since the last read, not from the start
        assert reader.read("s")[1] == store.runs("s")


@pytest.mark.parametrize(("args", "words"), [
    (["--storage", "sqlite:///nowhere/x.db"], "no database at nowhere/x.db"),
    (["--storage", "mysql+nodriver://u@h/db"], "error:"),
    (["--storage", "bogus"], "error:"),
])
def test_a_bad_storage_url_is_one_clear_error(args: list[str], words: str, tmp_path: Path):
    result = invoke("dashboard", *args, cwd=tmp_path)
    assert result.exit_code == 2, result.output
    assert words in result.output


def test_a_port_in_use_is_one_clear_error(db: str, tmp_path: Path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = invoke("dashboard", "--storage", db, "--port", str(port), cwd=tmp_path)
    assert result.exit_code == 2, result.output
    assert f"port {port} on 127.0.0.1 is in use" in result.output
    assert "--port" in result.output


def test_a_programs_other_trials_are_links_and_plain_in_the_report(tmp_path: Path):
    """Trials 4 and 5 compiled to trial 1's program: its row names them as links to their
    pages; the report, which holds no other page, names them as text."""
    url = f"sqlite:///{tmp_path / 'g.db'}"
    with Store.open(url) as store:
        fill(store, "g")
        for n in (4, 5):
            store.record_run("g", n, Role.SEARCH, {FAST: True, "xla_cpu_use_xnnpack": n == 4},
                             {}, TrialOutcome(OutcomeKind.OK, "", paired(0.8, "fast")), HOST,
                             ratio=0.8, env_key="host-a")
    with TestClient(create_app(Store.open(url, upgrade=False), refresh_s=0)) as c:
        html = c.get("/study/g").text
    assert ('<td class="group">trials <a href="/study/g/trial/4">4</a>, '
            '<a href="/study/g/trial/5">5</a></td>') in html
    assert invoke("report", "g", "--storage", url, "-o", "g.html", cwd=tmp_path).exit_code == 0
    assert '<td class="group">trials 4, 5</td>' in (tmp_path / "g.html").read_text()


def test_the_html_report_is_one_file_with_everything_inlined(db: str, tmp_path: Path):
    result = invoke("report", "s", "--storage", db, "-o", "r.html", cwd=tmp_path)
    assert result.exit_code == 0, result.output
    html = (tmp_path / "r.html").read_text()
    page = re.sub(r"<script>.*?</script>", "", html, flags=re.S)  # the inlined scripts
    assert not re.search(r"""(src|href)=["'](?!#|data:)""", page)  # nothing to fetch
    assert "apply trial 1" in html
    assert html.count("<script>") == 1 and '<script src' not in page  # dashboard.js only
    # the charts are inline SVG: no plotly.js, so a small study's report stays small
    assert "Plotly.newPlot(" not in html.replace("Plotly.newPlot(el", "")
    for chart in ("chart-progress", "chart-scatter"):
        assert re.search(rf'id="{chart}" class="chart"><svg', html), chart
    assert len(html.encode()) < 1_500_000
    # what to apply, as one line to copy, and what wrote the report
    assert re.search(rf'<code id="recommended-xla-flags">--{FAST}=true</code>', html)
    made = re.search(r'<p id="made" class="muted">written by autotune (\S+) on '
                     r'(\d{4}-\d\d-\d\d \d\d:\d\d UTC); measured with jaxlib ([^<]+)</p>', html)
    assert made and made.group(1) == __version__, html[:2000]


def test_a_report_written_under_source_date_epoch_names_that_time(db: str, tmp_path: Path,
                                                                 monkeypatch):
    """Reproducible, as `export` is: the report's time is the one SOURCE_DATE_EPOCH names."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")
    assert invoke("report", "s", "--storage", db, "-o", "r.html", cwd=tmp_path).exit_code == 0
    assert "written by autotune" in (text := (tmp_path / "r.html").read_text())
    assert "on 2026-01-01 00:00 UTC; measured with jaxlib 0.10.2" in text


def test_the_markdown_report_has_the_table_and_its_charts_beside_it(db: str, tmp_path: Path):
    result = invoke("report", EVIL, "--storage", db, "--format", "md", "-o", "r.md",
                    cwd=tmp_path)
    assert result.exit_code == 0, result.output
    text = (tmp_path / "r.md").read_text()
    assert "![r-progress.png](r-progress.png)" in text
    assert "| 1 | 1 |" in text and f"`{FAST}=true`" in text
    assert f"```bash\nXLA_FLAGS='--{FAST}=true'\n```" in text  # the line to apply
    assert re.search(r"^_written by autotune \S+ on \d{4}-\d\d-\d\d \d\d:\d\d UTC; "
                     r"measured with jaxlib 0\.10\.2_$", text, re.M)
    # Markdown shows a code span as it is written; outside one, HTML is escaped.
    assert EVIL not in text.replace(f"`{PASSES}={EVIL}`", "") and "&lt;script&gt;" in text
    for chart in ("r-progress.png", "r-scatter.png"):
        assert (tmp_path / chart).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_report_of_a_missing_study_exits_2_naming_it(db: str, tmp_path: Path):
    result = invoke("report", "nope", "--storage", db, cwd=tmp_path)
    assert result.exit_code == 2 and "nope" in result.output
    bad = invoke("report", "s", "--storage", db, "--format", "pdf", cwd=tmp_path)
    assert bad.exit_code == 2 and "unknown report format 'pdf'" in bad.output


def test_importance_without_an_optuna_study_says_why(client: TestClient):
    got = client.get("/api/study/s/importance").json()
    assert got["available"] is False and "no Optuna trials" in got["reason"]
    assert got["flags"] == [] and client.get("/api/study/nope/importance").status_code == 404


def test_the_studies_api_lists_each_study_once(client: TestClient, db: str):
    names = [row["name"] for row in client.get("/api/studies").json()]
    assert sorted(names) == sorted(["s", "t", EVIL])
    assert {row["state"] for row in client.get("/api/studies").json()} == {"searching"}
    with Store.open(db) as store:
        store.mark_finished("s", 4)
    page = client.get("/").text  # the studies page, as `autotune studies` says it
    assert '<td class="state" data-state="done">' in page.split('data-study="s"')[1]
    version = json.loads(client.get("/api/version").text)["version"]
    assert version == client.get("/api/version").json()["version"] and len(version) == 64


def wsgi_get(app: Any, path: str) -> tuple[str, Any]:
    """GET `path` from a WSGI app; (status line, decoded JSON body)."""
    from wsgiref.util import setup_testing_defaults

    environ: dict[str, Any] = {"PATH_INFO": path, "REQUEST_METHOD": "GET"}
    setup_testing_defaults(environ)
    status: list[str] = []
    body = b"".join(app(environ, lambda s, headers, exc_info=None: status.append(s)))
    return status[0], json.loads(body)


@pytest.mark.parametrize("first", ["autotune", "optuna"])
def test_optuna_dashboard_opens_the_same_database(first: str, tmp_path: Path):
    """autotune's tables (and their version table) break neither Optuna nor Optuna's own
    dashboard, whichever made its tables first, and autotune's dashboard reads on."""
    import optuna
    import optuna_dashboard

    from autotune.storage._optuna import rdb_storage

    url = f"sqlite:///{tmp_path / 'shared.db'}"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = rdb_storage(url, create=True) if first == "optuna" else None
    with Store.open(url) as store:
        fill(store, "s")
    study = optuna.create_study(study_name="s", storage=storage or rdb_storage(url, create=True))
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
    status, body = wsgi_get(optuna_dashboard.wsgi(url), "/api/studies")
    assert status.startswith("200"), body
    assert [s["study_name"] for s in body["study_summaries"]] == ["s"]
    status, detail = wsgi_get(optuna_dashboard.wsgi(url), f"/api/studies/{study._study_id}")
    assert status.startswith("200") and len(detail["trials"]) == 3
    with TestClient(create_app(Store.open(url, upgrade=False))) as c:
        assert c.get("/api/study/s").json()["recommendation"]["trial"] == 1


def test_workers_and_the_version_come_from_the_claims(url: str):
    """`Store.workers` counts each process's claims by state and tells live from silent;
    `Store.version` changes with a claim taken or ended, not with a live heartbeat."""
    from autotune.ground.records import ClaimState

    with Store.open(url) as store:
        store.ensure_study("s", "cpu", "matmul", "tiny", 1, "paired")
        take = [store.claim("s", "h", f"k{i}", Role.SEARCH, {}, i, owner)[1]
                for i, owner in enumerate([("a", 1), ("a", 1), ("b", 2), ("b", 2)])]
        assert all(c is not None for c in take)
        store.release(take[0].id, ClaimState.DONE)  # type: ignore[union-attr]
        store.release(take[2].id)  # type: ignore[union-attr]  (interrupted)
        before = store.version("s")
        assert store.beat(take[1].id)  # type: ignore[union-attr]
        assert store.version("s") == before
        workers = {w.owner: w for w in store.workers("s")}
        assert [(w.done, w.running, w.interrupted, w.live) for w in workers.values()] == [
            (1, 1, 0, True), (0, 1, 1, True)]
        assert [(w.live) for w in store.workers("s", within_s=-60)] == [False, False]
        assert store.version("s", within_s=-60) != before  # workers gone silent
        store.release(take[3].id)  # type: ignore[union-attr]
        assert store.version("s") != before
        assert {w.owner: w.running for w in store.workers("s")} == {"a:1": 1, "b:2": 0}


def test_a_report_of_a_study_whose_name_is_a_path_stays_in_this_folder(db: str,
                                                                       tmp_path: Path):
    """Issue 33: `report '../../x'` wrote outside the folder. The default file name is
    the study's name made safe (`cli.dashboard.default_report_path`)."""
    from autotune.cli.dashboard import default_report_path

    assert default_report_path("../../x", "html") == Path("_.._x.html")
    assert default_report_path("cpu-matmul-tiny-1dev", "md") == Path("cpu-matmul-tiny-1dev.md")
    here = tmp_path / "a" / "b"
    here.mkdir(parents=True)
    result = invoke("report", EVIL, "--storage", db, cwd=here)  # `/` in `</script>`
    assert result.exit_code == 0, result.output
    assert [p.name for p in here.iterdir()] == [default_report_path(EVIL, "html").name]
    assert "/" not in default_report_path(EVIL, "html").name
    above = {p.name for p in tmp_path.iterdir()} - {Path(db.split("///")[-1]).name}
    assert above == {"a"}  # nothing written above


def test_every_view_tells_one_story(tmp_path: Path):
    """One study whose leader's search process was luckier (x1.429) than its pooled four
    (x1.250): `best`, `best --format json`, the dashboard's page, the HTML report and the
    Markdown report show the same ranks, the pooled search figure with its n, the same
    confirmed interval and verdict, and the same recommendation."""
    from autotune.dashboard.render import ms_text, search_text

    url = f"sqlite:///{tmp_path / 'one.db'}"
    with Store.open(url) as store:
        fill(store, "one", first=0.7)
    rows = _views_agree(url, "one", tmp_path)
    assert [r["rank"] for r in rows] == [None, 1, 2]
    lead = rows[1]
    assert lead["search_speedup"] == pytest.approx(1 / 0.7)  # its own first process
    assert lead["observations"] == 5 and lead["pooled_speedup"] == pytest.approx(1.25)
    searched = search_text(lead)
    assert searched == "×1.250 n=5"
    low, high = lead["confirmed_interval"]
    confirmed = f"×{lead['confirmed_speedup']:.3f} [{low:.3f}, {high:.3f}]"
    assert "×1.429" not in invoke("best", "one", "--storage", url, cwd=tmp_path).output
    markdown = (tmp_path / "r.md").read_text()
    step = ms_text(lead["median_step_s"])
    assert f"| 1 | 1 | {step} | {searched} | {confirmed} faster (recommended) |" in markdown
    assert f"| 2 | 2 | {ms_text(rows[2]['median_step_s'])} | ×1.053 | not confirmed |" in markdown
    assert "apply trial 1: ×1.250" in markdown

def _views_agree(url: str, name: str, tmp_path: Path) -> list[dict[str, Any]]:
    """Every view of study `name` against `best --format json`: the dashboard's JSON is it
    row for row; the CLI table, the dashboard's page, the HTML and the Markdown report show
    each row's rank, search figure (`search_text`), confirmed interval and verdict, and
    one recommendation. Returns the JSON rows."""
    from autotune.dashboard.render import interval_text, search_text, speedup_text

    rows = json.loads(invoke("best", name, "--storage", url, "--format", "json",
                             cwd=tmp_path).output)
    table = " ".join(invoke("best", name, "--storage", url, cwd=tmp_path).output.split())
    assert invoke("report", name, "--storage", url, "-o", "r.html", cwd=tmp_path).exit_code == 0
    assert invoke("report", name, "--storage", url, "--format", "md", "-o", "r.md",
                  cwd=tmp_path).exit_code == 0
    with TestClient(create_app(Store.open(url, upgrade=False), refresh_s=0)) as c:
        api, page = c.get(f"/api/study/{name}").json(), c.get(f"/study/{name}").text
    assert api["best"] == rows
    rec = api["recommendation"]
    headline = (f"apply trial {rec['trial']}: {speedup_text(rec['speedup'])} "
                f"{interval_text(rec['interval'])}" if rec["recommended"]
                else "defaults: nothing measurably faster")
    assert [r["recommended"] for r in rows].count(True) == int(rec["recommended"])
    confirmed = {r["trial"]: f"{speedup_text(r['confirmed_speedup'])} "
                 f"{interval_text(r['confirmed_interval'])} {r['verdict']}"
                 for r in rows if r["rank"] is not None and r["verdict"] is not None}
    for r in rows:
        for part in search_text(r).split():
            assert part in table, (r["trial"], part)
    for html in (page, (tmp_path / "r.html").read_text()):
        cells = re.findall(r'<td class="num search"[^>]*>(.*?)</td>', html, re.S)
        shown = [" ".join(re.sub(r"<[^>]+>", " ", c).split()) for c in cells]
        figures = [s.removesuffix(" (A/A)").split(" [")[0].strip() for s in shown]
        assert figures == [search_text(r) for r in rows]
        ranks = re.findall(r'<td class="num rank"[^>]*>(\w+)</td>', html)
        assert ranks == [str(r["rank"]) if r["rank"] is not None else "baseline" for r in rows]
        flat = " ".join(re.sub(r"<[^>]+>", " ", html).split())
        assert all(text in flat for text in confirmed.values())
        assert headline in flat
    markdown = (tmp_path / "r.md").read_text()
    assert headline in markdown
    for r in rows:
        rank = r["rank"] if r["rank"] is not None else "baseline"
        assert f"| {rank} | {r['trial']} | " in markdown
        assert f" | {search_text(r)} | {confirmed.get(r['trial'], '')}" in markdown
    return rows


def test_every_view_of_a_recorded_table_study_tells_one_story(tmp_path: Path):
    """A study searched and confirmed on the recorded norm-act table (a real StudyRunner:
    racing, pooled programs, sequential confirmation; `TableLauncher` answers the trials
    from measured processes) reads the same in all five views."""
    import optuna

    url = f"sqlite:///{tmp_path / 'recorded.db'}"
    with Store.open(url) as store:
        runner = _norm_act_study(store, "recorded", 30, "auto", 2,
                                 optuna.storages.InMemoryStorage())
        runner.run()
        runner.confirm(3, 2, cap=16)
    rows = _views_agree(url, "recorded", tmp_path)
    assert len(rows) > 3 and any(r["verdict"] is not None for r in rows)
    assert any(r["observations"] and r["observations"] > 1 for r in rows)  # pooled programs


def test_a_proposal_that_reused_a_measurement_opens_the_trial_that_measured_it(tmp_path: Path):
    """A real study on the recorded norm-act table, Optuna's trials in the same database:
    proposals that repeated a measured configuration have no run of their own, and their
    page is the page of the trial whose measurement they reused, saying so."""
    import optuna

    from autotune.storage._optuna import rdb_storage

    url = f"sqlite:///{tmp_path / 'reuse.db'}"
    with Store.open(url) as store:
        summary = _norm_act_study(store, "reuse", 12, "random", 0,
                                  rdb_storage(url, create=True)).run()
        ids = {run.id: run.trial_number for run in store.runs("reuse")}
    assert summary.reused >= 2
    reused = {t.number: t.user_attrs["reused_run_id"] for t in optuna.load_study(
        study_name="reuse", storage=url).trials if "reused_run_id" in t.user_attrs}
    assert len(reused) == summary.reused
    with TestClient(create_app(Store.open(url, upgrade=False), refresh_s=0)) as c:
        for number, run_id in reused.items():
            page = c.get(f"/api/study/reuse/trial/{number}").json()
            assert (page["proposal"], page["trial"]) == (number, ids[run_id])
            html = c.get(f"/study/reuse/trial/{number}").text
            assert f"Proposal {number} repeated the configuration of trial {ids[run_id]}" in html
        measured = next(iter(ids.values()))
        assert c.get(f"/api/study/reuse/trial/{measured}").json()["proposal"] is None
        assert c.get("/study/reuse/trial/999").status_code == 404
        # the importance chart's data: `autotune importance --format json`, and more
        chart = c.get("/api/study/reuse/importance").json()
    cli = json.loads(invoke("importance", "reuse", "--storage", url, "--format", "json",
                            cwd=tmp_path).output)
    assert chart["available"] is True and chart["flags"]
    assert {k: v for k, v in chart.items() if k != "available"} == cli


def _norm_act_study(store: Store, name: str, trials: int, sampler: str, seed: int,
                    optuna_storage: Any) -> Any:
    """A real `StudyRunner` on `store` whose trials the recorded norm-act table answers."""
    from autotune.flags.catalog import load_catalog
    from autotune.launch.replay import ReplayTable, TableLauncher
    from autotune.spaces import load_space
    from autotune.study.plan import StudyPlan
    from autotune.study.runner import StudyRunner

    root = Path(__file__).resolve().parents[1]
    table = ReplayTable.load(root / "benchmarks/tables/norm-act-small.json")
    plan = StudyPlan.of(name=name, space=load_space(str(root / table.meta["space"])),
                        workload=table.workload(root), trials=trials, sampler=sampler,
                        seed=seed)
    return StudyRunner(plan, store, TableLauncher(table, load_catalog(), seed=seed),
                       optuna_storage)
