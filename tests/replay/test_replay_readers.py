"""Readers of logged streams: table-driven invalid inputs (one clear error each), join rules,
formats that must agree, bounded chunks."""

import base64
import copy
import gzip
import json
import shutil

import numpy as np
import pytest

from dpbandit_testing.replay_helpers import service_log_lines, write_jsonl
from streaming_dpbandit.replay.build import make_reader
from streaming_dpbandit.replay.datasets import obd_sample
from streaming_dpbandit.replay.errors import LogFormatError
from streaming_dpbandit.replay.readers.kafka_log import KafkaLogReader, parse_bound
from streaming_dpbandit.replay.readers.obd import ObdReader
from streaming_dpbandit.replay.readers.service_jsonl import ServiceJsonlReader
from streaming_dpbandit.replay.readers.tabular import ColumnMapping, CsvReader, ParquetReader
from streaming_dpbandit.stream.messages import context_value


def read_all(reader, chunk=None):
    return list(reader.chunks(chunk))


# -- CSV -----------------------------------------------------------------------------------------
HEADER = "event,arm,click,ps,pos,x1,x2"
ROWS = ["e0,0,1,0.5,1,0.1,0.2", "e1,1,0,0.5,2,-0.3,0.0", "e2,1,1,0.5,1,1.5,2.5"]
MAP = {
    "action": "arm",
    "reward": "click",
    "propensity": "ps",
    "context": "x*",
    "position": "pos",
    "position_base": 1,
    "event_id": "event",
    "n_arms": 2,
}


def write_csv(tmp_path, header=HEADER, rows=ROWS, name="log.csv"):
    p = tmp_path / name
    text = "\n".join([header, *rows]) + ("\n" if rows or header else "")
    if name.endswith(".gz"):
        p.write_bytes(gzip.compress(text.encode()))
    else:
        p.write_text(text)
    return p


def row(i, **change):
    cols = HEADER.split(",")
    vals = dict(zip(cols, ROWS[i].split(",")))
    vals.update(change)
    return ",".join(vals[c] for c in cols)


CSV_BAD = [
    ("missing action column", {"map": {"action": "armz"}}, "missing action column 'armz'"),
    ("missing propensity column", {"map": {"propensity": "p"}}, "missing propensity column"),
    ("missing propensity value", {"rows": [row(0, ps="")]}, "row 1: propensity is missing"),
    (
        "zero propensity",
        {"rows": [ROWS[0], row(1, ps="0")]},
        "row 2: propensity 0.0 is not in (0, 1]",
    ),
    ("negative propensity", {"rows": [row(0, ps="-0.5")]}, "propensity -0.5 is not in (0, 1]"),
    ("propensity above one", {"rows": [row(0, ps="1.5")]}, "propensity 1.5 is not in (0, 1]"),
    ("non-numeric reward", {"rows": [row(0, click="yes")]}, "reward is not a number ('yes')"),
    ("action out of range", {"rows": [row(0, arm="5")]}, "action '5' is not an arm index 0..1"),
    ("fractional action", {"rows": [row(0, arm="0.5")]}, "is not an arm index"),
    ("unknown label", {"map": {"arms": "a,b"}, "rows": [row(0, arm="c")]}, "not one of the arms"),
    ("row too long", {"rows": [ROWS[0] + ",9"]}, "line 2: 8 fields, the header has 7"),
    ("row too short", {"rows": [ROWS[0], "e1,1,0"]}, "line 3: 3 fields"),
    ("context glob matches nothing", {"map": {"context": "z*"}}, "no context column matches 'z*'"),
    ("non-finite context", {"rows": [row(0, x2="inf")]}, "context 'x2' is not finite"),
    ("missing context value", {"rows": [row(0, x1="")]}, "context 'x1' is missing"),
    ("position below base", {"rows": [row(0, pos="0")]}, "position '0' is not an integer >= 1"),
    ("empty file", {"header": "", "rows": []}, "empty file"),
    ("duplicate header", {"header": "arm,arm,click,ps,pos,x1,x2"}, "duplicate column names"),
    ("mapping without reward", {"map": {"reward": None}}, "needs reward"),
    ("unknown mapping key", {"map": {"colour": "x"}}, "unknown column-mapping key(s) colour"),
    ("bad n_arms", {"map": {"n_arms": "many"}}, "n_arms must be an integer"),
    ("duplicate arm labels", {"map": {"arms": "a,a", "n_arms": None}}, "labels must be unique"),
]


@pytest.mark.parametrize("case, change, message", CSV_BAD, ids=[c[0] for c in CSV_BAD])
def test_csv_invalid_input(tmp_path, case, change, message):
    mapping = {k: v for k, v in {**MAP, **change.get("map", {})}.items() if v is not None}
    p = write_csv(tmp_path, change.get("header", HEADER), change.get("rows", ROWS))
    with pytest.raises(LogFormatError) as err:
        read_all(CsvReader(p, mapping))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_csv_reads_mapping_labels_positions_and_gzip(tmp_path):
    for name in ("log.csv", "log.csv.gz"):
        p = write_csv(tmp_path, rows=ROWS, name=name)
        (b,) = read_all(CsvReader(p, MAP))
        assert b.event_ids.tolist() == ["e0", "e1", "e2"]
        assert b.actions.tolist() == [0, 1, 1] and b.positions.tolist() == [0, 1, 0]
        assert b.rewards.tolist() == [1.0, 0.0, 1.0] and b.propensities.tolist() == [0.5] * 3
        # disjoint encoding with intercept: arm 1's block is columns 3..5
        assert b.contexts.rows(b.actions)[2].tolist() == [0, 0, 0, 1.5, 2.5, 1.0]
        assert b.contexts.dense().shape == (3, 2, 6)
    labelled = {**MAP, "arms": "1,0", "n_arms": None}
    labelled = {k: v for k, v in labelled.items() if v is not None}
    (b,) = read_all(CsvReader(write_csv(tmp_path), labelled))
    assert b.actions.tolist() == [1, 0, 0]


def test_column_mapping_position_base_none_is_the_default():
    # None (as for every other optional key) means the default 0, not a None that breaks reads
    m = ColumnMapping.from_items({**MAP, "position_base": None})
    assert m.position_base == 0


def test_csv_scans_arms_when_not_given(tmp_path):
    rows = ["e0,2,1,0.5,1,0,0", "e1,0,0,0.5,1,0,0"]
    m = {k: v for k, v in MAP.items() if k != "n_arms"}
    r = CsvReader(write_csv(tmp_path, rows=rows), m).open()
    assert r.n_arms == 3
    rows = ["e0,red,1,0.5,1,0,0", "e1,blue,0,0.5,1,0,0"]
    r = CsvReader(write_csv(tmp_path, rows=rows), m).open()
    assert r.n_arms == 2 and read_all(r)[0].actions.tolist() == [1, 0]  # sorted labels


@pytest.mark.parametrize("chunk", [1, 2, 1000])
def test_csv_chunks_are_bounded_and_complete(tmp_path, chunk):
    rows = [f"e{i},{i % 2},{i % 3 == 0:d},0.5,1,{i},0" for i in range(25)]
    batches = read_all(CsvReader(write_csv(tmp_path, rows=rows), MAP), chunk)
    assert max(len(b) for b in batches) <= chunk
    assert sum(len(b) for b in batches) == 25
    assert np.concatenate([b.event_ids for b in batches]).tolist() == [f"e{i}" for i in range(25)]


# -- Parquet -------------------------------------------------------------------------------------
pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402


def write_parquet(tmp_path, columns):
    p = tmp_path / "log.parquet"
    pq.write_table(pa.table(columns), p, row_group_size=2)
    return p


PQ_COLS = {
    "event": ["e0", "e1", "e2"],
    "arm": [0, 1, 1],
    "click": [1.0, 0.0, 1.0],
    "ps": [0.5, 0.5, 0.5],
    "pos": [1, 2, 1],
    "x1": [0.1, -0.3, 1.5],
    "x2": [0.2, 0.0, 2.5],
}

PQ_BAD = [
    ("missing column", {"drop": "ps"}, "missing propensity column 'ps'"),
    ("null propensity", {"set": ("ps", [0.5, None, 0.5])}, "row 2: propensity is missing"),
    ("zero propensity", {"set": ("ps", [0.5, 0.5, 0.0])}, "row 3: propensity 0.0 is not in"),
    ("action out of range", {"set": ("arm", [0, 7, 1])}, "row 2: action 7 is not an arm index"),
    ("null reward", {"set": ("click", [1.0, None, 0.0])}, "row 2: reward is missing"),
    ("string reward", {"set": ("click", ["1", "x", "0"])}, "reward is not a number ('x')"),
]


@pytest.mark.parametrize("case, change, message", PQ_BAD, ids=[c[0] for c in PQ_BAD])
def test_parquet_invalid_input(tmp_path, case, change, message):
    cols = dict(PQ_COLS)
    if "drop" in change:
        cols.pop(change["drop"])
    if "set" in change:
        cols[change["set"][0]] = change["set"][1]
    with pytest.raises(LogFormatError) as err:
        read_all(ParquetReader(write_parquet(tmp_path, cols), MAP))
    assert message in str(err.value)


def test_parquet_not_a_parquet_file(tmp_path):
    p = tmp_path / "log.parquet"
    p.write_text("not parquet")
    with pytest.raises(LogFormatError, match="not a readable Parquet file"):
        ParquetReader(p, MAP).open()


def test_parquet_without_pyarrow_says_how_to_install(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(LogFormatError, match=r"pip install 'streaming_dpbandit\[parquet\]'"):
        ParquetReader(write_csv(tmp_path), MAP).open()


def test_parquet_and_csv_give_the_same_batches(tmp_path):
    (c,) = read_all(CsvReader(write_csv(tmp_path), MAP))
    batches = read_all(ParquetReader(write_parquet(tmp_path, PQ_COLS), MAP), 2)
    assert [len(b) for b in batches] == [2, 1]
    for name in ("actions", "rewards", "propensities", "positions"):
        assert (
            np.concatenate([getattr(b, name) for b in batches]).tolist()
            == getattr(c, name).tolist()
        )
    dense = np.concatenate([b.contexts.dense() for b in batches])
    assert np.array_equal(dense, c.contexts.dense())


# -- the service's JSONL log -----------------------------------------------------------------------
def jsonl(tmp_path, lines, name="log.jsonl"):
    p = tmp_path / name
    write_jsonl(p, lines)
    return p


def mutate(lines, index, **changes):
    out = copy.deepcopy(lines)
    for k, v in changes.items():
        if v is None:
            out[index]["value"].pop(k, None)
        else:
            out[index]["value"][k] = v
    return out


BASE = service_log_lines(4, K=3, d=2)  # lines 0..2 = event 0 (context, decision, feedback)

JSONL_BAD = [
    ("not JSON", lambda L: [*L[:3], "{not json"], "line 4: not JSON"),
    (
        "not a topic record",
        lambda L: [*L[:3], {"value": {}}],
        'expected {"topic": ..., "value": ...}',
    ),
    (
        "unknown topic",
        lambda L: [*L[:3], {"topic": "clicks", "value": {}}],
        "unknown topic 'clicks'",
    ),
    (
        "context without id",
        lambda L: mutate(L, 0, event_id=None),
        "invalid contexts message: event_id",
    ),
    (
        "context with a NaN",
        lambda L: mutate(L, 0, event_time=float("nan")),
        "invalid contexts message",
    ),
    (
        "mismatched dimensions",
        lambda L: mutate(
            L, 3, arms=[{"arm_id": f"arm-{k}", "features": [0.0] * 3} for k in range(3)]
        ),
        "arms have 3 features, earlier events 2 (mismatched dimensions)",
    ),
    ("zero propensity", lambda L: mutate(L, 1, propensity=0.0), "propensity 0.0 is not in (0, 1]"),
    (
        "propensity above one",
        lambda L: mutate(L, 1, propensity=2.0),
        "propensity 2.0 is not in (0, 1]",
    ),
    ("missing propensity", lambda L: mutate(L, 1, propensity=None), "propensity: Field required"),
    (
        "text propensity",
        lambda L: mutate(L, 1, propensity="high"),
        "invalid decisions message: propensity",
    ),
    (
        "conflicting decisions",
        lambda L: [
            *L[:2],
            mutate(L, 1, arm_index=(L[1]["value"]["arm_index"] + 1) % 3, arm_id="arm-x")[1],
            *L[2:],
        ],
        "conflicting decisions",
    ),
    (
        "arm id does not match the index",
        lambda L: mutate(L, 1, arm_id="arm-9"),
        "is not the context's candidate at that index",
    ),
    ("two bandits", lambda L: mutate(L, 3, bandit_id="other"), "several bandits"),
    (
        "shared context without a catalogue",
        lambda L: mutate(L, 0, arms=None, shared=[1.0, 2.0], arm_ids=["arm-0", "arm-1", "arm-2"]),
        "give the bandit's arm catalogue",
    ),
    ("no contexts", lambda L: [x for x in L if x["topic"] != "contexts"], "no context events"),
    ("bad reward", lambda L: mutate(L, 2, reward="lots"), "invalid feedback message: reward"),
]


@pytest.mark.parametrize("case, make, message", JSONL_BAD, ids=[c[0] for c in JSONL_BAD])
def test_service_jsonl_invalid_input(tmp_path, case, make, message):
    p = tmp_path / "log.jsonl"
    lines = make(BASE)
    p.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    with pytest.raises(LogFormatError) as err:
        read_all(ServiceJsonlReader(p))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_service_jsonl_reads_what_was_logged(tmp_path):
    lines = service_log_lines(50, K=3, d=2, seed=1)
    for name in ("log.jsonl", "log.jsonl.gz"):
        p = tmp_path / name
        text = "".join(json.dumps(x) + "\n" for x in lines)
        p.write_bytes(gzip.compress(text.encode()) if name.endswith(".gz") else text.encode())
        batches = read_all(ServiceJsonlReader(p), 16)
        assert [len(b) for b in batches] == [16, 16, 16, 2]
        b = batches[0]
        dec = [x["value"] for x in lines if x["topic"] == "decisions"]
        fb = [x["value"] for x in lines if x["topic"] == "feedback"]
        ctx = [x["value"] for x in lines if x["topic"] == "contexts"]
        assert b.event_ids.tolist() == [d["event_id"] for d in dec[:16]]
        assert b.actions.tolist() == [d["arm_index"] for d in dec[:16]]
        assert b.rewards.tolist() == [f["reward"] for f in fb[:16]]
        assert np.allclose(b.propensities, 1 / 3)
        assert b.contexts.dense()[3].tolist() == [a["features"] for a in ctx[3]["arms"]]


def _binary_contexts(lines, encoding):
    """The log with every context as a binary context message (``value_b64``)."""
    out = []
    for x in lines:
        if x["topic"] == "contexts":
            ev = x["value"]
            X = np.array([a["features"] for a in ev["arms"]], dtype=np.float64)
            ids = [a["arm_id"] for a in ev["arms"]]
            raw = context_value(ev["event_id"], ev["bandit_id"], ev["event_time"], X, ids, encoding)
            x = {"topic": x["topic"], "value_b64": base64.b64encode(raw).decode("ascii")}
        out.append(x)
    return out


@pytest.mark.parametrize("encoding", ["raw-f64", "raw-f32"])
def test_service_jsonl_reads_binary_context_messages(tmp_path, encoding):
    # a recorded stream of binary contexts (DPBC, as `serve --file` reads it) replays as its
    # JSON form does: float64 bit for bit, float32 as the nearest float32 of each value
    lines = service_log_lines(20, K=3, d=2, seed=1)
    p, pb = tmp_path / "log.jsonl", tmp_path / "binary.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    pb.write_text("".join(json.dumps(x) + "\n" for x in _binary_contexts(lines, encoding)))
    want, got = read_all(ServiceJsonlReader(p), 8), read_all(ServiceJsonlReader(pb), 8)
    assert [len(b) for b in got] == [len(b) for b in want] == [8, 8, 4]
    for a, b in zip(want, got):
        assert b.event_ids.tolist() == a.event_ids.tolist()
        assert b.actions.tolist() == a.actions.tolist() and b.rewards.tolist() == a.rewards.tolist()
        X = a.contexts.dense()
        X = X if encoding == "raw-f64" else X.astype(np.float32).astype(np.float64)
        assert b.contexts.dense().tobytes() == X.tobytes()
    bad = _binary_contexts(lines, encoding)
    bad[0]["value_b64"] = base64.b64encode(base64.b64decode(bad[0]["value_b64"])[:-1]).decode()
    pb.write_text("".join(json.dumps(x) + "\n" for x in bad))
    with pytest.raises(LogFormatError, match="line 1: invalid contexts message: invalid_event"):
        read_all(ServiceJsonlReader(pb))


def _events(n=6):
    return service_log_lines(n, K=2, d=1, seed=2, feedback_delay=1.0)


def test_join_holds_early_feedback_and_orders_by_decision(tmp_path):
    L = _events()
    # feedback of event 1 before its context, decision of event 0 after event 1's lines
    order = [L[5], L[3], L[4], L[0], L[1], L[2], *L[6:]]
    (b,) = read_all(ServiceJsonlReader(jsonl(tmp_path, order)))
    assert b.event_ids.tolist()[:2] == ["e-1", "e-0"]  # decision order
    assert b.rewards[0] == L[5]["value"]["reward"]


def test_join_window_and_missing_rewards(tmp_path):
    L = _events()
    L[2]["value"]["event_time"] = L[0]["value"]["event_time"] - 5  # before the decision
    del L[5]  # event 1 never gets a reward
    r = ServiceJsonlReader(jsonl(tmp_path, L))
    (b,) = read_all(r)
    assert "e-0" not in b.event_ids.tolist() and "e-1" not in b.event_ids.tolist()
    assert r.counters["feedback_outside_window"] == 1
    assert r.counters["dropped_without_reward"] == 2
    r = ServiceJsonlReader(jsonl(tmp_path, L), missing_reward="default", default_reward=-1.0)
    (b,) = read_all(r)
    assert b.event_ids.tolist()[:2] == ["e-0", "e-1"] and b.rewards[:2].tolist() == [-1.0, -1.0]


def test_join_ignores_repeated_decisions_and_other_bandits_when_named(tmp_path):
    L = _events()
    L.insert(3, copy.deepcopy(L[1]))  # the service repeated a decision after a crash
    other = service_log_lines(2, K=2, d=1, bandit="other")
    r = ServiceJsonlReader(jsonl(tmp_path, L + other), bandit_id="b")
    (b,) = read_all(r)
    assert len(b) == 6 and r.counters["repeated_decisions"] == 1
    assert r.counters["other_bandits"] == 6


def test_join_memory_is_bounded(tmp_path):
    L = _events(50)
    L = [x for x in L if x["topic"] != "feedback"]  # no rewards at all, no watermark
    r = ServiceJsonlReader(jsonl(tmp_path, L), max_pending=8, missing_reward="default")
    batches = read_all(r)
    assert sum(len(b) for b in batches) == 50
    assert r.counters["forced_expiries"] == 50 - 8


def test_shared_contexts_use_the_catalogue(tmp_path):
    L = service_log_lines(3, K=2, d=2)
    for x in L:
        if x["topic"] == "contexts":
            v = x["value"]
            v["shared"] = v["arms"][0]["features"]
            v["arm_ids"] = [a["arm_id"] for a in v.pop("arms")]
    r = ServiceJsonlReader(jsonl(tmp_path, L), arms=["arm-0", "arm-1"])
    (b,) = read_all(r)
    assert r.d == 4 and b.contexts.dense()[0, 1, :2].tolist() == [0.0, 0.0]


@pytest.mark.parametrize("arms", [None, ["arm-0", "arm-1", "arm-2"]])
def test_a_slate_request_in_a_joined_log_is_one_clear_error(tmp_path, arms):
    # a slate request has no candidates to join; with a catalogue it was a TypeError traceback
    lines = mutate(service_log_lines(3), 0, arms=None, slate_size=2)
    with pytest.raises(LogFormatError, match="is a slate request"):
        read_all(ServiceJsonlReader(jsonl(tmp_path, lines), arms=arms))


# -- Open Bandit Dataset ---------------------------------------------------------------------------
def obd_copy(tmp_path, rows=50, behavior="random"):
    src = obd_sample(behavior)
    dst = tmp_path / behavior / "men"
    dst.mkdir(parents=True)
    with gzip.open(src / "men.csv.gz", "rt") as fh:
        lines = [next(fh) for _ in range(rows + 1)]
    (dst / "men.csv").write_text("".join(lines))
    shutil.copy(src / "item_context.csv", dst / "item_context.csv")
    return dst


def edit_csv(path, fn):
    lines = path.read_text().splitlines()
    path.write_text("\n".join(fn(lines)) + "\n")


def set_field(col):
    def fn(value):
        def edit(lines):
            head = lines[0].split(",")
            j = head.index(col)
            f = lines[2].split(",")
            f[j] = value
            lines[2] = ",".join(f)
            return lines

        return edit

    return fn


def drop_column(col):
    def edit(lines):
        j = lines[0].split(",").index(col)
        return [",".join(x for i, x in enumerate(line.split(",")) if i != j) for line in lines]

    return edit


OBD_BAD = [
    ("missing click column", "men.csv", drop_column("click"), "missing column(s) click"),
    (
        "affinity columns vs items",
        "item_context.csv",
        lambda lines: lines[:-1],
        "34 user-item affinity columns but item_context.csv has 33 items (mismatched dimensions)",
    ),
    ("item out of range", "men.csv", set_field("item_id")("99"), "row 2: item_id 99 is not among"),
    (
        "zero propensity",
        "men.csv",
        set_field("propensity_score")("0"),
        "row 2: propensity_score 0.0",
    ),
    ("missing click", "men.csv", set_field("click")(""), "row 2: click is missing"),
    ("position zero", "men.csv", set_field("position")("0"), "row 2: position must be >= 1"),
    (
        "text affinity",
        "men.csv",
        set_field("user-item_affinity_3")("hi"),
        "user-item_affinity_3 is not a number",
    ),
    ("short row", "men.csv", lambda lines: [*lines[:2], "1,2,3"], "line 3: 3 fields"),
    (
        "non-integer item ids",
        "item_context.csv",
        lambda L: [L[0], L[1].replace(",0,", ",x,", 1), *L[2:]],
        "item_id must be",
    ),
]


@pytest.mark.parametrize("case, file, edit, message", OBD_BAD, ids=[c[0] for c in OBD_BAD])
def test_obd_invalid_input(tmp_path, case, file, edit, message):
    d = obd_copy(tmp_path)
    edit_csv(d / file, edit)
    with pytest.raises(LogFormatError) as err:
        read_all(ObdReader(d))
    assert message in str(err.value)


def test_obd_missing_files_and_options(tmp_path):
    d = obd_copy(tmp_path)
    (d / "item_context.csv").unlink()
    with pytest.raises(LogFormatError, match="no such file"):
        ObdReader(d).open()
    empty = tmp_path / "empty" / "all"
    empty.mkdir(parents=True)
    with pytest.raises(LogFormatError, match=r"no all\.csv"):
        ObdReader(empty).open()
    with pytest.raises(LogFormatError, match="features must be"):
        ObdReader(obd_sample(), features="item,colour").open()


def test_obd_sample_reads_like_the_csv_module():
    import csv

    r = ObdReader(obd_sample("bts"))
    batches = read_all(r, 700)
    with gzip.open(obd_sample("bts") / "men.csv.gz", "rt") as fh:
        rows = list(csv.DictReader(fh))
    assert sum(len(b) for b in batches) == len(rows) == 3000
    b = batches[1]
    for i in (0, 350, 699):
        src = rows[700 + i]
        assert b.actions[i] == int(src["item_id"]) and b.positions[i] == int(src["position"]) - 1
        assert b.rewards[i] == float(src["click"])
        assert b.propensities[i] == float(src["propensity_score"])
        aff = float(src[f"user-item_affinity_{b.actions[i]}"])
        assert b.contexts.rows(b.actions[i : i + 1])[0, -1] == pytest.approx(
            aff / (1 + aff) / np.sqrt(3)
        )
    assert max(np.linalg.norm(b.contexts.dense(), axis=2).max() for b in batches) <= 1 + 1e-12


@pytest.mark.parametrize(
    "features, d", [("item", 34), ("item_features", 28), ("affinity", 1), ("item,affinity", 35)]
)
def test_obd_feature_blocks(features, d):
    r = ObdReader(obd_sample(), features=features).open()
    assert r.d == d
    b = next(r.chunks(10))
    assert b.contexts.dense().shape == (10, 34, d)


# -- builders and Kafka bounds ---------------------------------------------------------------------
BUILD_BAD = [
    ({"log": "nope.bin"}, "no such log"),
    ({"log": "x.bin"}, "cannot tell the format"),
    ({"log": "missing.csv"}, "no such log"),
    ({"log": "kafka://", "fmt": "kafka"}, "kafka://HOST:PORT"),
    ({"log": "x.jsonl", "params": {"features": "item"}}, "does not apply to service-jsonl"),
    ({"log": "x.csv", "start": "5"}, "select a range of a Kafka log"),
    ({"log": "kafka://h:1", "params": {"topics": "a,b"}}, "three topics"),
    ({"log": "x.jsonl", "fmt": "json"}, "unknown format"),
]


@pytest.mark.parametrize("kwargs, message", BUILD_BAD, ids=[m for _, m in BUILD_BAD])
def test_make_reader_errors(kwargs, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("x.jsonl", "x.csv", "x.bin"):
        (tmp_path / name).write_text("")
    with pytest.raises(LogFormatError, match=message.replace("(", r"\(")):
        make_reader(kwargs.pop("log"), **kwargs)


def test_make_reader_csv_needs_a_mapping(tmp_path):
    with pytest.raises(LogFormatError, match="needs a column mapping"):
        make_reader(str(write_csv(tmp_path)))


@pytest.mark.parametrize("text", ["soon", "t:0=x", "2024-13-40"])
def test_kafka_bounds_reject_nonsense(text):
    with pytest.raises(LogFormatError, match="bad"):
        parse_bound(text)


def test_kafka_empty_string_bound_is_no_bound():
    # parse_bound("") is None (no bound); a reader given start="" multiplied None by 1000
    reader = KafkaLogReader("127.0.0.1:1", start="")
    tp = object()  # resolving None needs no broker: the default offsets are kept
    assert reader._resolve(None, [tp], reader.start, {tp: 7}) == {tp: 7}


@pytest.mark.parametrize("kind", ["obd", "disjoint", "constant", "dense"])
def test_context_projection_equals_the_dense_product(kind, tmp_path):
    from streaming_dpbandit.replay.contexts import ConstantContexts, DenseContexts, DisjointContexts

    rng = np.random.default_rng(0)
    if kind == "obd":
        ctx = next(ObdReader(obd_sample()).chunks(50)).contexts
    elif kind == "disjoint":
        ctx = DisjointContexts(rng.normal(size=(50, 3)), n_arms=4)
    elif kind == "constant":
        ctx = ConstantContexts(50, n_arms=4)
    else:
        ctx = DenseContexts(rng.normal(size=(50, 4, 3)))
    coef = rng.normal(size=(50, ctx.d))
    want = np.einsum("bkd,bd->bk", ctx.dense(), coef)
    assert np.allclose(ctx.project(coef), want)
