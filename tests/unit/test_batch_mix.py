"""`xferscope batch --size-mix`: batches of mixed sizes drawn from a distribution or a file, with
the seed; their parsing, the draws, the command's files and bad input, on the simulated engine."""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from pathlib import Path

import pytest

from xferscope import cli
from xferscope.batch.measure import BatchOptions, from_dict, measure, to_dict
from xferscope.batch.mix import LARGEST, parse_size_mix
from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.core.errors import OptionError


@pytest.fixture(autouse=True)
def history(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "history.sqlite3"
    monkeypatch.setenv("XFERSCOPE_HISTORY", str(path))
    return path


@pytest.fixture
def sizes_file(tmp_path) -> Path:
    path = tmp_path / "sizes.txt"
    path.write_text("# KV-cache blocks, a few large\n4KiB, 16KiB 64KiB\n\n1MiB  # big\n100\n")
    return path


def test_each_kind_draws_within_its_bounds_and_repeats_with_the_seed(sizes_file):
    lognormal = parse_size_mix("lognormal:16KiB:1")
    draws = lognormal.draw(20000, 7)
    assert draws == lognormal.draw(20000, 7) and draws != lognormal.draw(20000, 8)
    assert all(1 <= d <= LARGEST for d in draws)
    assert statistics.median(draws) == pytest.approx(16384, rel=0.05)
    # the mean of a lognormal: median x exp(sigma^2 / 2)
    assert lognormal.mean() == pytest.approx(16384 * math.exp(0.5), rel=0.02)
    uniform = parse_size_mix("uniform:100:200")
    assert set(uniform.draw(5000, 1)) == set(range(100, 201)) and uniform.mean() == 150
    from_file = parse_size_mix(f"file:{sizes_file}")
    assert from_file.values == (4096, 16384, 65536, 1 << 20, 100)
    assert set(from_file.draw(500, 3)) == set(from_file.values)
    assert from_file.label == "sizes.txt (5 sizes)"
    assert parse_size_mix("lognormal:4KiB:0").draw(10, 0) == [4096] * 10


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("gaussian:4KiB:1", "is not lognormal:MEDIAN:SIGMA, uniform:MIN:MAX or file:PATH"),
        ("lognormal:4KiB", "is not lognormal:MEDIAN:SIGMA"),
        ("lognormal:4KiB:9", "sigma '9' must be a number from 0 to 4"),
        ("lognormal:4KiB:x", "sigma 'x'"),
        ("lognormal:big:1", "the median 'big' is not a byte count"),
        ("uniform:2KiB:1KiB", "MIN '2KiB' is more than MAX '1KiB'"),
        ("uniform:0:1KiB", "MIN must be at least 1 byte"),
        ("uniform:1:1TiB", "is over 256 MiB"),
        ("file:/nonexistent/sizes.txt", "cannot read '/nonexistent/sizes.txt'"),
    ],
)
def test_bad_specs_are_one_clear_error(spec, fragment):
    with pytest.raises(OptionError) as caught:
        parse_size_mix(spec)
    assert str(caught.value).startswith("--size-mix: ") and fragment in str(caught.value)


def test_a_traces_copies_csv_gives_its_bytes_column(tmp_path):
    # the columns `xferscope trace` writes (copies.csv), abridged
    trace = tmp_path / "copies.csv"
    trace.write_text(
        "pid,direction,src,dst,bytes,start_ns,end_ns\n"
        "41,h2d,pinned,device,4096,10,20\n41,h2d,pinned,device,4096,30,40\n"
        "41,d2h,device,pageable,67108864,50,900\n"
    )
    mix = parse_size_mix(f"file:{trace}")
    assert mix.values == (4096, 4096, 64 << 20) and mix.label == "copies.csv (3 sizes)"
    trace.write_text("pid,direction,bytes\n41,h2d,many\n")
    with pytest.raises(OptionError, match=r"copies\.csv row 2: 'many' is not a byte count"):
        parse_size_mix(f"file:{trace}")
    trace.write_text("pid,direction,bytes\n")
    with pytest.raises(OptionError, match="holds no sizes in its bytes column"):
        parse_size_mix(f"file:{trace}")


def test_bad_files_name_the_line(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n\n")
    with pytest.raises(OptionError, match="holds no sizes"):
        parse_size_mix(f"file:{empty}")
    bad = tmp_path / "bad.txt"
    bad.write_text("4KiB\n8KiB lots\n")
    with pytest.raises(OptionError, match=r"bad\.txt line 2: 'lots' is not a byte count"):
        parse_size_mix(f"file:{bad}")


def test_a_mixed_batch_moves_the_drawn_sizes_and_reads_back(sizes_file):
    options = BatchOptions(counts=(1, 64), sizes=(), size_mix=f"file:{sizes_file}", seed=11)
    result = measure(SimulatedEngine(), options)
    mix = parse_size_mix(options.size_mix)
    assert {c.size for c in result.cells} == {mix.mean()}
    for c in result.cells:
        assert c.mix == "sizes.txt (5 sizes)"
        assert c.bytes == c.mixed_bytes == sum(mix.draw(c.count, 11))
    assert from_dict(json.loads(json.dumps(to_dict(result)))).cells == result.cells
    assert "staged" in {best.method for best, _ in result.winners().values()}
    # one column of mixed sizes: no size where cudaMemcpyBatchAsync stops beating the loop
    assert not any(f.code.startswith("batch_api_crossover") for f in result.findings)
    assert any("64 copies of sizes.txt (5 sizes) (avg" in f.message for f in result.findings)


def test_the_command_labels_the_mix_in_every_output(capsys, tmp_path):
    code = cli.main(["batch", "--simulate", "--counts", "4,256", "--size-mix",
                     "lognormal:4KiB:1.5", "-o", str(tmp_path)])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "lognormal 4 KiB s=1.5, mean 12" in " ".join(out.split())
    (directory,) = tmp_path.glob("batch-*")
    doc = json.loads((directory / "batch.json").read_text())
    assert doc["options"]["size_mix"] == "lognormal:4KiB:1.5"
    assert all(c["mix"] == "lognormal 4 KiB s=1.5" and c["bytes"] > 0 for c in doc["cells"])
    assert all(w["mix"] == "lognormal 4 KiB s=1.5" for w in doc["winners"])
    rows = list(csv.DictReader(io.StringIO((directory / "batch.csv").read_text())))
    assert {r["mix"] for r in rows} == {"lognormal 4 KiB s=1.5"}
    assert all(int(r["bytes"]) > 0 for r in rows)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--size-mix", "lognormal:4KiB:1", "--calibrate"], "--size-mix: not with --calibrate"),
        (["--size-mix", "uniform:1:2", "--sizes", "64"], "give --sizes or --size-mix, not both"),
        (["--size-mix", "triangle:1:2"], "--size-mix: 'triangle:1:2' is not"),
        (["--size-mix", "file:/nonexistent"], "--size-mix: cannot read"),
    ],
)
def test_bad_input_is_one_line(capsys, tmp_path, args, fragment):
    code = cli.main(["batch", "--simulate", *args, "-o", str(tmp_path / "out")])
    _, err = capsys.readouterr()
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
