"""Suites are validated before anything runs, with the field path and a plain message."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetval.suite import SuiteError, load_suite, parse_suite, shipped_suites


def problems(data: object) -> list[str]:
    with pytest.raises(SuiteError) as err:
        parse_suite(data)
    return err.value.problems


def base(**over: object) -> dict:
    return {"name": "t", "steps": [{"check": "collectives"}], **over}


@pytest.mark.parametrize("name", ["smoke", "collectives", "bandwidth"])
def test_shipped_suites_load(name):
    assert load_suite(name).name == name


def test_every_shipped_suite_is_valid():
    for name in shipped_suites():
        load_suite(name)


def test_unknown_key_names_its_path_and_the_key_it_is_close_to():
    assert problems(base(placement={"world_sizes": [2], "strateg": "PACK"})) == [
        "placement.strateg: unknown key 'strateg'; did you mean 'strategy'?"
    ]
    step = {"check": "bandwidth", "itres": 5}
    assert sorted(problems(base(steps=[step], timeouts={"step_ss": 9}, zzz=1))) == [
        "steps.0.itres: unknown key 'itres'; did you mean 'iters'?",
        "timeouts.step_ss: unknown key 'step_ss'; did you mean 'step_s'?",
        "zzz: unknown key 'zzz'",  # nothing close: no guess
    ]


def test_wrong_type():
    (msg,) = problems(base(placement={"world_sizes": "four"}))
    assert msg.startswith("placement.world_sizes: ")


def test_empty_size_range():
    (msg,) = problems(base(steps=[{"check": "bandwidth", "sizes": {"min": "4MiB", "max": "1KiB"}}]))
    assert msg == "steps.0.sizes: empty size range: min 4.0MiB > max 1.0KiB"


@pytest.mark.parametrize(
    ("field", "value", "path"),
    [
        ("collectives", ["allreduce"], "steps.0.collectives.0"),
        ("ops", ["mean"], "steps.0.ops.0"),
        ("dtypes", ["float8"], "steps.0.dtypes.0"),
    ],
)
def test_unknown_vocabulary(field, value, path):
    (msg,) = problems(base(steps=[{"check": "collectives", field: value}]))
    assert msg.startswith(f"{path}: Input should be ")


def test_unknown_check_lists_the_known_ones():
    (msg,) = problems(base(steps=[{"check": "nope"}]))
    assert msg.startswith("steps.0: unknown check 'nope'; known: collectives, bandwidth")


def test_step_without_check():
    (msg,) = problems(base(steps=[{"name": "x"}]))
    assert msg.startswith("steps.0: a step needs `check:`")


def test_fault_rules():
    assert problems(base(faults=[{"kind": "delay", "rank": 1}])) == [
        "faults.0: a delay fault needs `ms`"
    ]
    assert problems(base(faults=[{"kind": "hang"}])) == [
        "faults.0: a fault names exactly one of `rank`, `node` or `between`"
    ]
    (msg,) = problems(base(faults=[{"kind": "crash", "rank": 9}]))
    assert "rank 9 does not exist; the largest world size is 2" in msg
    (msg,) = problems(base(faults=[{"kind": "crash", "rank": 0, "step": "nope"}]))
    assert "no step named 'nope'" in msg


def test_duplicate_step_names():
    (msg,) = problems(base(steps=[{"check": "collectives"}, {"check": "collectives"}]))
    assert "repeated: collectives" in msg


def test_not_a_mapping_and_bad_yaml(tmp_path: Path):
    assert problems([1, 2]) == ["(suite): expected a mapping, got list"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(SuiteError, match=r"\(yaml\)") as err:
        load_suite(bad)
    assert f'in "{bad}", line 1' in str(err.value) and "<unicode string>" not in str(err.value)
    with pytest.raises(SuiteError, match="no shipped suite of that name"):
        load_suite("no-such-suite")


def test_defaults_and_timeouts():
    s = parse_suite(base(steps=[{"check": "bandwidth", "timeout_s": 7}, {"check": "collectives"}]))
    assert s.step_timeout(s.steps[0]) == 7
    assert s.step_timeout(s.steps[1]) == s.timeouts.step_s
    assert s.steps[0].sizes.sizes()[:3] == [8, 16, 32]


def test_collective_timeout_defaults_below_the_step_deadline():
    spec = parse_suite({"name": "t", "steps": [{"check": "collectives"}]})
    assert (spec.timeouts.step_s, spec.timeouts.collective) == (300, 120)
    short = parse_suite(
        {"name": "t", "steps": [{"check": "collectives"}], "timeouts": {"step_s": 60}}
    )
    assert short.timeouts.collective == 30


def test_collective_timeout_not_shorter_than_the_step_is_refused():
    with pytest.raises(
        SuiteError, match=r"timeouts: collective_s \(60s\) must be shorter than step_s \(60s\)"
    ):
        parse_suite(
            {
                "name": "t",
                "steps": [{"check": "collectives"}],
                "timeouts": {"step_s": 60, "collective_s": 60},
            }
        )


def test_a_yaml_error_reaches_the_user_whole(tmp_path: Path):
    """`fleetval run` on a file with a YAML syntax error: exit 2 naming the file and line, the
    parser's words with their brackets as written (not taken for console markup)."""
    from typer.testing import CliRunner

    from fleetval.cli import app

    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nsteps:\n  - check: [bandwidth\n")
    res = CliRunner().invoke(app, ["run", str(bad), "--data", str(tmp_path / "data")])
    said = " ".join(res.output.split())
    assert res.exit_code == 2
    assert f'in "{bad}", line 3, column 12' in said
    assert "expected ',' or ']', but got '<stream end>'" in said


def test_a_shipped_suite_s_header_names_its_largest_size():
    """A header that says "to 4 MiB" measures 4 MiB: the largest size its sweeps reach."""
    import re

    from fleetval.text import human_bytes

    for name, file in shipped_suites().items():
        said = re.search(r"to (\d+ [KMG]i?B)", file.read_text().splitlines()[0])
        if not said:
            continue
        sizes = [s for step in load_suite(name).steps if hasattr(step, "sizes")
                 for s in step.sizes.sizes()]  # fmt: skip
        assert human_bytes(max(sizes)) == said.group(1).replace(" ", ""), name
