"""`autotune flags check`: the documents' flag lists against the real installed XLA."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from autotune.cli import app
from autotune.cli.apply import refused
from autotune.flags.catalog import Channel, load_catalog
from autotune.flags.lint import FindingKind, FlagUse, lint, parse_uses
from autotune.flags.probe import probe
from autotune.ground.errors import AutotuneError

runner = CliRunner()

# The recommended flag list of the PGLE document (003), as printed there.
PGLE_RECOMMENDED = (
    "--xla_gpu_enable_latency_hiding_scheduler=true --xla_gpu_enable_triton_gemm=false "
    "--xla_gpu_simplify_all_fp_conversions --xla_gpu_graph_level=0 "
    "--xla_gpu_enable_highest_priority_async_stream=true "
    "--xla_gpu_all_reduce_combine_threshold_bytes=1073741824 "
    "--xla_gpu_all_gather_combine_threshold_bytes=1073741824 "
    "--xla_gpu_reduce_scatter_combine_threshold_bytes=1073741824 "
    "--xla_gpu_enable_pipelined_all_gather=true --xla_gpu_enable_pipelined_reduce_scatter=true "
    "--xla_gpu_enable_pipelined_all_reduce=true --xla_gpu_enable_while_loop_double_buffering=true "
    "--xla_gpu_enable_triton_softmax_fusion=false --xla_gpu_enable_all_gather_combine_by_dim=false "
    "--xla_gpu_enable_reduce_scatter_combine_by_dim=false "
    "--xla_disable_hlo_passes=rematerialization "
    "--xla_gpu_pgle_profile_file_or_directory_path=/tmp/profile.pbtxt"
)
# The GPU guide's (001) FSDP, collective-matmul, p2p and misc. flags, as listed there.
GPU_GUIDE = (
    "--xla_gpu_enable_latency_hiding_scheduler=true "
    "--xla_gpu_enable_while_loop_double_buffering=true "
    "--xla_gpu_enable_pipelined_all_gather=true --xla_gpu_enable_pipelined_reduce_scatter=true "
    "--xla_gpu_enable_pipelined_all_reduce=true --xla_gpu_enable_pipelined_collectives=false "
    "--xla_gpu_enable_pipelined_p2p=true --xla_gpu_collective_permute_decomposer_threshold=1024 "
    "--xla_gpu_lhs_enable_gpu_async_tracker=true --xla_gpu_multi_streamed_windowed_einsum=true "
    "--xla_gpu_threshold_for_windowed_einsum_mib=0 --xla_gpu_enable_custom_fusions=true "
    "--xla_gpu_enable_address_computation_fusion=true --xla_gpu_enable_nccl_user_buffers=true "
    "--xla_gpu_enable_nccl_comm_splitting=true --xla_gpu_enable_nccl_per_stream_comms=false "
    "--xla_gpu_cudnn_gemm_fusion=true --xla_gpu_enable_cudnn_fmha=false"
)


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def check(text: str, catalog, libtpu: str = ""):
    uses = parse_uses(text, libtpu)
    report = probe(catalog, extra=sorted({u.name for u in uses}))
    return lint(uses, catalog, report), report, uses


@pytest.mark.slow
@pytest.mark.parametrize("text", [PGLE_RECOMMENDED, GPU_GUIDE], ids=["pgle-003", "gpu-001"])
def test_findings_that_abort_are_exactly_the_flags_the_probe_rejects(text, catalog):
    findings, report, uses = check(text, catalog)
    aborting = {f.flag for f in findings if f.would_abort}
    assert aborting == set(report.unknown_in([u.name for u in uses]))
    assert aborting  # both documents hold flags this XLA no longer has


@pytest.mark.slow
def test_pgle_list_names_the_obsolete_flags_and_their_replacement(catalog):
    findings, _, _ = check(PGLE_RECOMMENDED, catalog)
    by_flag = {f.flag: f for f in findings}
    assert {"xla_gpu_simplify_all_fp_conversions", "xla_gpu_graph_level",
            "xla_gpu_enable_triton_softmax_fusion"} <= {
        f.flag for f in findings if f.kind is FindingKind.OBSOLETE}
    assert "--xla_gpu_enable_command_buffer" in by_flag["xla_gpu_graph_level"].message
    assert by_flag["xla_gpu_enable_highest_priority_async_stream"].kind is FindingKind.NO_EFFECT


@pytest.mark.slow
@pytest.mark.parametrize(
    ("text", "libtpu", "kind", "flag"),
    [
        ("--xla_tpu_enable_async_all_to_all=true", "", FindingKind.WRONG_CHANNEL,
         "xla_tpu_enable_async_all_to_all"),
        ("--NCCL_PROTO=SIMPLE", "", FindingKind.WRONG_CHANNEL, "NCCL_PROTO"),
        ("--xla_gpu_enable_command_buffer=0", "", FindingKind.BAD_VALUE,
         "xla_gpu_enable_command_buffer"),
        ("--xla_backend_optimization_level=7", "", FindingKind.BAD_VALUE,
         "xla_backend_optimization_level"),
        ("--xla_gpu_all_reduce_combine_threshold_bytes", "", FindingKind.BAD_VALUE,
         "xla_gpu_all_reduce_combine_threshold_bytes"),
        ("--xla_cpu_enable_fast_math=true --xla_cpu_enable_fast_math=false", "",
         FindingKind.DUPLICATE, "xla_cpu_enable_fast_math"),
        ("", "--xla_tpu_enable_ici_ag_pipelining=true", FindingKind.PARTIAL_GROUP,
         "xla_tpu_enable_ici_ag_pipelining"),
        ("--xla_gpu_enable_latency_hyding_scheduler=true", "", FindingKind.UNKNOWN,
         "xla_gpu_enable_latency_hyding_scheduler"),
    ],
)
def test_each_kind_of_finding(catalog, text, libtpu, kind, flag):
    findings, _, _ = check(text, catalog, libtpu)
    assert (kind, flag) in {(f.kind, f.flag) for f in findings}, findings


@pytest.mark.slow
def test_unknown_flag_suggests_the_closest_name(catalog):
    findings, _, _ = check("--xla_gpu_enable_latency_hyding_scheduler=true", catalog)
    assert "did you mean --xla_gpu_enable_latency_hiding_scheduler?" in findings[0].message


@pytest.mark.slow
def test_a_clean_string_has_no_findings(catalog):
    findings, _, _ = check("--xla_cpu_enable_fast_math=true --xla_gpu_enable_triton_gemm=false",
                           catalog)
    assert findings == []


@pytest.mark.slow
def test_cli_exit_codes_and_words(monkeypatch):
    clean = runner.invoke(app, ["flags", "check", "--xla_cpu_enable_fast_math=true"])
    assert clean.exit_code == 0 and "no findings" in clean.output
    dirty = runner.invoke(app, ["flags", "check", PGLE_RECOMMENDED])
    assert dirty.exit_code == 1
    assert "3 of which would abort the job at start" in dirty.output
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_graph_level=0")
    monkeypatch.delenv("LIBTPU_INIT_ARGS", raising=False)
    from_env = runner.invoke(app, ["flags", "check", "--env"])
    assert from_env.exit_code == 1 and "xla_gpu_graph_level" in from_env.output
    tpu = runner.invoke(app, ["flags", "check", "--libtpu", "--xla_tpu_rwb_fusion=false"])
    assert tpu.exit_code == 0
    assert "cannot be checked here (libtpu is not installed): --xla_tpu_rwb_fusion" in tpu.output
    junk = runner.invoke(app, ["flags", "check", "xla_no_dashes=1"])
    assert junk.exit_code == 2 and "Traceback" not in junk.output


def test_flags_list_filters_and_show(catalog):
    tpu = runner.invoke(app, ["flags", "list", "--backend", "tpu"])
    assert tpu.exit_code == 0 and "xla_tpu_rwb_fusion" in tpu.output
    assert "xla_gpu_enable_latency_hiding_scheduler" not in tpu.output
    space = runner.invoke(app, ["flags", "list", "--space", "tpu-latency-bound"])
    assert "xla_all_gather_latency_bound_threshold_in_bytes" in space.output
    assert "xla_tpu_rwb_fusion" not in space.output
    missing = runner.invoke(app, ["flags", "show", "xla_nope"])
    assert missing.exit_code == 2


@pytest.mark.slow
def test_flags_show_says_what_this_xla_says():
    gone = runner.invoke(app, ["flags", "show", "xla_gpu_graph_level"])
    assert gone.exit_code == 0
    assert "unknown to jaxlib" in gone.output and "xla_gpu_enable_command_buffer" in gone.output
    tpu = runner.invoke(app, ["flags", "show", "xla_tpu_rwb_fusion"])
    assert "cannot be checked here" in tpu.output


OLD_FRACTION, NEW_FRACTION = "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_CLIENT_MEM_FRACTION"


def env_uses(**variables: str) -> list[FlagUse]:
    return [FlagUse(name, value, Channel.ENV) for name, value in variables.items()]


def test_a_deprecated_variable_is_a_warning_that_names_its_replacement(catalog):
    findings = lint(env_uses(**{OLD_FRACTION: "0.9"}), catalog, None)
    assert [(f.kind, f.flag, f.would_abort) for f in findings] == [
        (FindingKind.DEPRECATED, OLD_FRACTION, False)]
    assert findings[0].message.startswith(f"{OLD_FRACTION} is deprecated (")
    assert findings[0].message.endswith(f"use {NEW_FRACTION} instead")
    assert findings[0].fix == f"replace it with {NEW_FRACTION}"
    assert refused(findings) == []  # `autotune apply` warns, runs the job
    assert lint(env_uses(**{NEW_FRACTION: "0.9"}), catalog, None) == []


def test_the_old_and_the_new_name_together_would_abort(catalog):
    findings = lint(env_uses(**{OLD_FRACTION: "0.9", NEW_FRACTION: "0.8"}), catalog, None)
    both = [f for f in findings if f.would_abort]
    assert [(f.kind, f.flag) for f in both] == [(FindingKind.DEPRECATED, OLD_FRACTION)]
    assert f"{OLD_FRACTION} and its new name {NEW_FRACTION} are both set" in both[0].message
    assert refused(findings) == both


def test_a_deprecated_name_in_a_flag_string_is_named_as_written(catalog):
    findings = lint(parse_uses(f"--{OLD_FRACTION}=0.9"), catalog, None)
    kinds = {f.kind: f for f in findings}
    assert kinds.keys() == {FindingKind.WRONG_CHANNEL, FindingKind.DEPRECATED}
    assert f"--{OLD_FRACTION} is deprecated" in kinds[FindingKind.DEPRECATED].message


def test_flags_list_marks_the_deprecated_name():
    listed = runner.invoke(app, ["flags", "list", "--channel", "env"])
    assert listed.exit_code == 0
    lines = listed.output.splitlines()
    row = lines[lines.index(OLD_FRACTION) + 1]  # the name's line, then its facts
    assert "deprecated" in row


@pytest.mark.slow
def test_flags_check_env_reads_the_catalog_variables_of_this_shell(monkeypatch):
    catalog = load_catalog()
    for name in ["XLA_FLAGS", "LIBTPU_INIT_ARGS",
                 *(spec.name for spec in catalog if spec.channel is Channel.ENV)]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(OLD_FRACTION, "0.9")
    result = runner.invoke(app, ["flags", "check", "--env"])
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert "deprecated" in text and f"replace it with {NEW_FRACTION}" in text
    assert "1 flag checked" in text and "1 finding, 0 of which would abort" in text


flag_strings = st.lists(
    st.one_of(
        st.text(max_size=30),
        st.builds(lambda n, v: f"--{n}={v}", st.sampled_from(sorted(load_catalog().names())),
                  st.text(max_size=12)),
    ),
    max_size=6,
).map(" ".join)


def tokens_of(text: str) -> list[tuple[str, str | None]] | None:
    """What the flag string means: (name, value) per `--name[=value]` token; None for junk."""
    pairs: list[tuple[str, str | None]] = []
    for token in text.split():
        name, sep, value = token.removeprefix("--").partition("=")
        if not token.startswith("--") or not name:
            return None
        pairs.append((name, value if sep else None))
    return pairs


@settings(max_examples=150, deadline=None)
@given(flag_strings)
@example("--xla_cpu_enable_fast_math=true --xla_no_such_flag --xla_cpu_enable_fast_math=false")
@example("--xla_cpu_enable_fast_math=true xla_no_dashes=1")
@example("--0 --0")  # an uncatalogued name given twice (found by hypothesis)
def test_junk_flag_strings_give_only_project_errors(catalog, text):
    expected = tokens_of(text)
    if expected is None:
        with pytest.raises(AutotuneError, match="flag string token"):
            parse_uses(text)
        return
    uses = parse_uses(text)
    assert [(u.name, u.value) for u in uses] == expected

    findings = lint(uses, catalog, None)  # no probe: must still never raise

    names = [name for name, _ in expected]
    assert {f.flag for f in findings} <= set(names)
    # a name given twice is a finding whatever it is; every other finding is of a catalogued flag
    assert {f.flag for f in findings if f.kind is not FindingKind.DUPLICATE} <= set(
        catalog.names())
    twice = {name for name in names if names.count(name) > 1}
    assert {f.flag for f in findings if f.kind is FindingKind.DUPLICATE} == twice
    # without a probe nothing can say this XLA lacks a flag: an uncatalogued name is let be
    assert all(f.kind is not FindingKind.UNKNOWN for f in findings)
    repeats = [name for i, name in enumerate(names) if name in names[:i]]
    assert sorted(f.flag for f in findings if f.kind is FindingKind.DUPLICATE) == sorted(repeats)
    for f in findings:
        assert f.fix, f
        if f.kind is not FindingKind.PARTIAL_GROUP:
            assert f"--{f.flag}" in f.message, f


@pytest.mark.slow
@pytest.mark.parametrize(
    ("text", "summary"),
    [
        ("--NCCL_PROTO=SIMPLE", "1 flag checked against jaxlib {v}: 1 finding, 1 of which"),
        ("--NCCL_PROTO=SIMPLE --xla_cpu_enable_fast_math=maybe",
         "2 flags checked against jaxlib {v}: 2 findings, 1 of which"),
    ],
)
def test_flags_check_counts_a_wrong_channel_flag_among_those_that_abort(text, summary):
    from importlib.metadata import version

    from typer.testing import CliRunner

    from autotune.cli import app

    result = CliRunner().invoke(app, ["flags", "check", text])

    assert result.exit_code == 1, result.output
    expected = summary.format(v=version("jaxlib")) + " would abort the job at start"
    assert expected in result.stdout
