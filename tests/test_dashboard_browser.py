"""The dashboard in a real browser (Debian's Chromium, headless, driven by Playwright) over
a database filled by a real short study, served by a real `autotune dashboard` process.

Skipped, saying so, where no Chromium is installed (CI installs Debian's `chromium`
with apt; no browser is ever downloaded). The screenshot of the study page is kept
in `test-artifacts/` (or `$AUTOTUNE_TEST_ARTIFACTS`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote
from urllib.request import urlopen

import pytest

from autotune.storage import Store

pytestmark = pytest.mark.slow

CHROMIUM = os.environ.get("AUTOTUNE_TEST_CHROMIUM") or shutil.which("chromium") \
    or shutil.which("chromium-browser")
ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = Path(os.environ.get("AUTOTUNE_TEST_ARTIFACTS", ROOT / "test-artifacts"))
EVIL = "<script>window.pwned=1</script>"
EPOCH = "1767225600"  # SOURCE_DATE_EPOCH for both sides: exports compare byte for byte
STUDY = ["study", "--space", "cpu", "--benchmark", "matmul", "--preset", "tiny", "--devices",
         "1", "--seed", "3", "--confirm", "1", "--confirm-repeats", "2", "--confirm-max", "0",
         "--name", "real"]
NAME = "real"
WON = "won"  # a study of recorded runs whose recommendation is a flag (test_dashboard.fill)
MANY = "many"  # WON's runs and 150 more search runs: two pages of runs
CLI = [sys.executable, "-c", "from autotune.cli import main; main()"]

if CHROMIUM is None:
    pytest.skip("no Chromium here: install Debian's `chromium` (apt) to run the browser "
                "tests", allow_module_level=True)


def autotune(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SOURCE_DATE_EPOCH": EPOCH}
    done = subprocess.run([*CLI, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def copy_study(url: str, source: str, target: str) -> None:
    """A second study holding the runs of `source`, under another name."""
    with Store.open(url) as store:
        record = store.get_study(source)
        store.ensure_study(target, record.space, record.benchmark, record.preset,
                           record.devices, record.mode)
        for run in store.runs(source):
            store.record_run(target, run.trial_number, run.role, run.flags, run.env,
                             run.outcome, run.environment, ratio=run.ratio,
                             env_key=run.env_key)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("browser")


@pytest.fixture(scope="module")
def db(folder: Path) -> str:
    url = f"sqlite:///{folder / 'autotune.db'}"
    autotune(*STUDY, "--trials", "4", "--storage", url, cwd=folder)
    copy_study(url, NAME, EVIL)
    copy_study(url, NAME, "twin")
    from test_dashboard import fill  # recorded runs: trial 1 confirmed faster, recommended

    with Store.open(url) as store:
        fill(store, WON)
        fill_many(store)
    return url


def fill_many(store: Store) -> None:
    """`test_dashboard.fill`'s study and 150 more search runs, every fifth pruned."""
    from test_dashboard import HOST, fill, paired

    from autotune.ground.records import OutcomeKind, Role, TrialOutcome

    fill(store, MANY)
    for n in range(4, 154):
        kind = OutcomeKind.PRUNED if n % 5 == 0 else OutcomeKind.OK
        store.record_run(MANY, n, Role.SEARCH, {"xla_cpu_prefer_vector_width": n}, {},
                         TrialOutcome(kind, "", paired(0.99, f"p{n}")), HOST,
                         ratio=0.99, env_key="host-a")


@pytest.fixture(scope="module")
def server(db: str, folder: Path) -> Iterator[str]:
    """`autotune dashboard` on a free port, checking for new results every second."""
    env = {**os.environ, "SOURCE_DATE_EPOCH": EPOCH}
    proc = subprocess.Popen([*CLI, "dashboard", "--storage",
                             db, "--port", "0", "--refresh", "1"], cwd=folder, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
    assert found, line
    try:
        yield f"http://127.0.0.1:{found.group(1)}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM,
                                     args=["--no-sandbox", "--headless"])
        yield chromium
        chromium.close()


class Page:
    """A browser page that records every console error and uncaught exception."""

    def __init__(self, browser: Any, **options: Any) -> None:
        self.context = browser.new_context(viewport={"width": 1300, "height": 900},
                                           accept_downloads=True, **options)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error"
                     else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def __enter__(self) -> Page:
        return self

    def __exit__(self, *exc: object) -> None:
        self.context.close()


def best_json(db: str, folder: Path, name: str = NAME) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(
        autotune("best", name, "--storage", db, "--format", "json", cwd=folder).stdout)
    return rows


def test_no_page_logs_a_console_error(browser: Any, server: str, db: str, folder: Path):
    trials = [row["trial"] for row in best_json(db, folder)]
    paths = ["/", f"/study/{NAME}", f"/study/{NAME}/compare/{trials[0]}/{trials[-1]}",
             f"/compare?a={NAME}&b=twin"] + [f"/study/{NAME}/trial/{t}" for t in trials]
    with Page(browser) as p:
        for path in paths:
            response = p.page.goto(server + path, wait_until="networkidle")
            assert response is not None and response.status == 200, path
        assert p.errors == []
        p.page.goto(server + f"/study/{NAME}", wait_until="networkidle")
        assert p.page.locator("#chart-progress .main-svg").count() >= 1  # plotly drew
        assert p.page.locator("#chart-scatter .main-svg").count() >= 1
        assert p.page.locator("#chart-timeline .main-svg").count() >= 1
        lanes = p.page.evaluate("""() => document.getElementById('chart-timeline').data
            .map(t => [t.name, t.y.length, t.customdata.every(Number.isInteger)])""")
        assert {name for name, _, _ in lanes} >= {"baseline", "search"}, lanes
        assert all(n > 0 and ints for _, n, ints in lanes), lanes
        flags = p.page.evaluate("""() => [...document.querySelectorAll('#chart-slices .slice')]
            .map(el => [el.dataset.flag, el.data[0].x.length])""")
        api = json.loads(urlopen(server + f"/api/study/{NAME}").read())
        assert flags == [[s["flag"], len(s["points"])] for s in api["slices"]], flags
        importance = json.loads(urlopen(server + f"/api/study/{NAME}/importance").read())
        if importance["available"] and importance["flags"]:
            p.page.wait_for_selector("#chart-importance .main-svg", timeout=30_000)
            drawn = p.page.evaluate("document.getElementById('chart-importance').data[0].y")
            assert drawn == [f["param"] for f in reversed(importance["flags"])]
        else:  # a study of four real trials may hold fewer than two to compare
            p.page.wait_for_selector("#chart-importance.muted", timeout=30_000)
        assert p.errors == []


def test_the_best_table_equals_best_format_json(browser: Any, server: str, db: str,
                                                folder: Path):
    expected = best_json(db, folder)
    with Page(browser) as p:
        p.page.goto(server + f"/study/{NAME}", wait_until="networkidle")
        rows = p.page.locator("#best tbody tr")
        assert rows.count() == len(expected)
        for i, want in enumerate(expected):
            row = rows.nth(i)
            assert row.get_attribute("data-trial") == str(want["trial"])
            assert row.locator("td.rank").inner_text() == (
                "baseline" if want["rank"] is None else str(want["rank"]))
            pooled = want["observations"] and want["observations"] > 1
            shown = want["pooled_speedup"] if pooled else want["search_speedup"]
            assert row.locator("td.search").inner_text().startswith(
                f"×{shown:.3f}" + (f" n={want['observations']}" if pooled else ""))
            flags = [line.strip() for line in row.locator("td.flags code").all_inner_texts()]
            assert flags == [f"{k}={json.dumps(v).strip(chr(34))}"
                             for k, v in sorted(want["flags_changed"].items())]
            if want["rank"] is not None:
                verdict = row.locator("td.confirmed .verdict").inner_text()
                assert verdict == (want["verdict"] or "not confirmed")
                if want["confirmed_interval"]:
                    low, high = want["confirmed_interval"]
                    assert f"[{low:.3f}, {high:.3f}]" in row.locator("td.confirmed").inner_text()
        for order in (sorted, lambda xs: sorted(xs, reverse=True)):  # click: up, again: down
            p.page.click("#best thead th:text-is('trial')")
            shown = [int(t) for t in p.page.locator("#best tbody td.trial").all_inner_texts()]
            assert shown == order(row["trial"] for row in expected)
        assert p.errors == []


def test_a_chart_point_names_its_trial_and_opens_its_page(browser: Any, server: str,
                                                        db: str, folder: Path):
    """Hovering a point of either chart names its trial; clicking it opens that trial."""
    with Page(browser) as p:
        p.page.goto(server + f"/study/{NAME}", wait_until="networkidle")
        trials = p.page.evaluate(
            "document.getElementById('chart-scatter').data[0].customdata")
        assert trials and all(isinstance(t, int) for t in trials)
        ranked = [row["trial"] for row in best_json(db, folder)]
        assert set(trials) <= set(ranked)  # one point per program, its best row's trial
        line = p.page.evaluate("document.getElementById('chart-progress').data[1]")
        assert line["name"] == "best so far (pooled, backed)" and line["customdata"]
        # each point names the study's answer then: a ranked trial, or XLA's defaults (a
        # study of four real trials may keep them throughout, as it did in one CI run)
        for trial, text in zip(line["customdata"], line["text"], strict=True):
            assert (text == "XLA's defaults") if trial is None else (
                trial in ranked and text.startswith(f"trial {trial}, pooled over ")), text
        # a click as Plotly reports one: its handler opens the point's trial
        p.page.evaluate("""() => {
            const el = document.getElementById('chart-progress');
            el.emit('plotly_click', {points: [{customdata: el.data[0].customdata[1]}]});
        }""")
        p.page.wait_for_url(re.compile(r"/trial/\d+$"))
        number = int(p.page.url.rsplit("/", 1)[1])
        assert p.page.locator("h1").inner_text().startswith(f"Trial {number}")
        assert p.errors == []


def test_every_run_is_reached_by_its_pages_a_filter_and_a_link(browser: Any, server: str):
    """From the study page to all its runs: the second page, the pruned runs alone (the
    filter keeps to the pages), and a run's trial opened from its row."""
    with Page(browser) as p:
        p.page.goto(server + f"/study/{MANY}", wait_until="networkidle")
        p.page.click("#all-runs")
        p.page.wait_for_url(server + f"/runs/{MANY}")
        assert p.page.locator("#runs-count").inner_text().startswith(
            "158 of 158 runs, page 1 of 2.")
        assert p.page.locator("#runs tbody tr").count() == 100
        p.page.click("#pages a:text-is('2')")
        p.page.wait_for_url(re.compile(r"page=2$"))
        rows = p.page.locator("#runs tbody tr")
        assert rows.count() == 58 and rows.last.get_attribute("data-trial") == "153"
        p.page.select_option("#runs-filter select[name=outcome]", "pruned")
        p.page.click("#runs-filter button[type=submit]")
        p.page.wait_for_url(re.compile(r"outcome=pruned"))
        assert p.page.locator("#runs-count").inner_text().startswith("30 of 158 runs.")
        outcomes = p.page.locator("#runs tbody tr td:nth-child(4)").all_inner_texts()
        assert len(outcomes) == 30 and {o.split()[0] for o in outcomes} == {"pruned"}
        p.page.locator("#runs tbody tr").first.locator("a").click()
        p.page.wait_for_url(re.compile(rf"/study/{MANY}/trial/5$"))
        assert p.page.locator("h1").inner_text().startswith("Trial 5")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        p.page.screenshot(path=str(ARTIFACTS / "dashboard-runs.png"), full_page=True)
        assert p.errors == []


def test_two_trials_and_two_studies_compare_side_by_side(browser: Any, server: str):
    """The study page's compare form opens two trials with their confirmed figures and
    flags; the studies page's form opens two studies with the winner's flags."""
    with Page(browser) as p:
        p.page.goto(server + f"/study/{WON}", wait_until="networkidle")
        p.page.select_option("#trial-a", "1")
        p.page.select_option("#trial-b", "2")
        p.page.click("#trial-compare")
        p.page.wait_for_url(server + f"/study/{WON}/compare/1/2")
        assert p.page.locator("#same-program").inner_text() == (
            "They compiled to different programs.")
        claimed = p.page.locator("#figures td.claimed").all_inner_texts()
        assert claimed[0].startswith("×1.250 [") and claimed[0].endswith("] faster")
        assert claimed[1] == "not confirmed"
        diff = p.page.locator("#diff tbody tr").all_inner_texts()
        assert any(row.startswith("xla_cpu_enable_fast_math") and "true" in row
                   for row in diff), diff
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        p.page.screenshot(path=str(ARTIFACTS / "dashboard-compare-trials.png"),
                          full_page=True)
        p.page.goto(server + "/", wait_until="networkidle")
        p.page.select_option("#compare-a", WON)
        p.page.select_option("#compare-b", MANY)
        p.page.click("#compare-go")
        p.page.wait_for_url(re.compile(r"/compare\?a=won&b=many$"))
        assert "holds" in p.page.locator("#winner_a_on_b").inner_text()
        assert p.page.locator("#winner_a_on_b-flags").inner_text() == (
            "--xla_cpu_enable_fast_math=true")
        assert p.page.locator("#common tbody tr").count() >= 1
        p.page.screenshot(path=str(ARTIFACTS / "dashboard-compare-studies.png"),
                          full_page=True)
        assert p.errors == []


def test_a_download_equals_autotune_export(browser: Any, server: str, db: str, folder: Path):
    with Page(browser) as p:
        p.page.goto(server + f"/study/{NAME}", wait_until="networkidle")
        for fmt in ("yaml", "json", "env", "jax"):
            with p.page.expect_download() as info:
                p.page.click(f"#recommendation a.download:text-is('{fmt}')")
            got = Path(info.value.path()).read_bytes()
            autotune("export", NAME, "--storage", db, "--format", fmt, "-o", f"cli.{fmt}",
                     cwd=folder)
            assert got == (folder / f"cli.{fmt}").read_bytes(), fmt


def test_a_study_named_with_a_script_shows_as_text(browser: Any, server: str):
    with Page(browser) as p:
        p.page.goto(server + "/", wait_until="networkidle")
        assert EVIL in p.page.locator("#studies").inner_text()
        p.page.goto(server + f"/study/{quote(EVIL, safe='')}", wait_until="networkidle")
        assert p.page.locator("#study-name").inner_text() == EVIL
        assert p.page.evaluate("window.pwned") is None
        assert p.errors == []


def test_a_screenshot_of_the_study_page(browser: Any, server: str):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "dashboard-study.png"
    with Page(browser) as p:
        p.page.goto(server + f"/study/{NAME}", wait_until="networkidle")
        p.page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_missing_pages_are_404_with_a_link_back(browser: Any, server: str):
    with Page(browser) as p:
        response = p.page.goto(server + f"/study/{NAME}/trial/999")
        assert response is not None and response.status == 404
        assert "has no trial 999" in p.page.inner_text("#detail")
        p.page.click("#back")
        p.page.wait_for_url(server + "/")


@pytest.mark.parametrize("name", [NAME, WON])
def test_the_report_opens_offline(browser: Any, db: str, folder: Path, name: str):
    """The real study's report and a recommended one's: charts drawn with no request, the
    recommended flags' line copied by its button."""
    autotune("report", name, "--storage", db, "-o", f"report-{name}.html", cwd=folder)
    assert (folder / f"report-{name}.html").stat().st_size < 1_500_000
    fetched: list[str] = []
    with Page(browser, offline=True) as p:
        p.page.on("request", lambda r: fetched.append(r.url))
        p.page.goto((folder / f"report-{name}.html").as_uri(), wait_until="load")
        assert p.page.locator("#chart-progress svg").count() == 1
        assert p.page.locator("#chart-scatter svg").count() == 1
        assert p.page.locator("#made").inner_text().startswith("written by autotune ")
        if name == WON:
            line = p.page.locator("#recommended-xla-flags").inner_text()
            assert line == "--xla_cpu_enable_fast_math=true"
            button = p.page.locator("button.copy[data-copy=recommended-xla-flags]")
            button.click()  # the clipboard's promise settles after the click returns
            p.page.wait_for_selector(
                "button.copy[data-copy=recommended-xla-flags]:text-is('copied')",
                timeout=10_000)
            assert button.inner_text() == "copied"
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        p.page.screenshot(path=str(ARTIFACTS / f"report-{name}.png"), full_page=True)
        assert p.errors == []
    assert [u for u in fetched if not u.startswith(("file:", "data:"))] == []


def test_the_page_refreshes_while_a_study_runs(browser: Any, server: str, db: str,
                                              folder: Path):
    """The same study, continued to one more trial in the background: the open page
    reloads by itself and shows it."""
    with Page(browser) as p:
        p.page.goto(server + f"/study/{NAME}", wait_until="networkidle")
        p.page.evaluate("window.autotuneMark = 1")  # gone once the page reloads
        runs = p.page.locator("#progress td.num").first.inner_text()
        log = folder / "refresh-study.log"
        with log.open("w") as out:
            study = subprocess.Popen([*CLI, *STUDY, "--trials", "5", "--storage", db],
                                     cwd=folder, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                time.sleep(1)
                try:
                    if p.page.evaluate("window.autotuneMark") is None and \
                            p.page.locator("#progress td.num").first.inner_text() != runs:
                        break
                except Exception:  # noqa: BLE001 (the page is reloading right now)
                    continue
            else:
                pytest.fail(f"the page did not refresh while the study ran (study exit "
                            f"{study.poll()}, page version "
                            f"{p.page.evaluate('document.body.dataset.version')!r}, server's "
                            f"{urlopen(server + f'/api/study/{NAME}/version').read()!r}):\n"
                            + log.read_text()[-3000:])
        finally:
            study.wait(timeout=600)
        assert study.returncode == 0, log.read_text()[-3000:]
        assert p.errors == []
