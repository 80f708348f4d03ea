"""The on-disk index: built once, served like the files, shared by several workers."""

from __future__ import annotations

import io
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from tqdm import tqdm

from replay_server.errors import LoadError
from replay_server.index import file as index_file
from replay_server.index.encoding import encode
from replay_server.index.file import StoredIndex
from replay_server.index.loading import load
from replay_server.saved.loader import INDEX_MAGIC
from replay_server.settings import Settings
from replay_server.wire.keys import KEY_VERSION
from tests.support import (
    CLI,
    MODEL,
    ROOT,
    assert_error,
    chat_record,
    chat_response,
    damaged_answer,
    damaged_index,
    serving,
    spawn,
    tokenizer_record,
    user,
    write_jsonl,
)

SAVED = [ROOT / "examples", ROOT / "tests" / "data" / "openai_batch"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("idx") / "run.idx"
    result = subprocess.run([*CLI, "index", *map(str, SAVED), "-o", str(out)],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "wrote" in result.stderr and "11 prompts" in result.stderr
    return out


def test_the_index_holds_exactly_what_loading_the_files_gives(built: Path) -> None:
    loaded = load(SAVED, progress=False).index
    stored = StoredIndex(built)
    assert sorted(stored.models) == sorted(loaded.models)
    for name, run in loaded.models.items():
        kept = stored.models[name]
        assert (kept.records, kept.samples, kept.unusable_records) == (
            run.records, run.samples, run.unusable_records)
        assert len(kept.entries) == len(run.entries)
        for key, value in run.entries.items():
            assert encode(kept.entries.get(key)) == encode(value)  # type: ignore
        assert kept.entries.get(b"\0" * 16) is None


def test_keys_that_share_a_row_id_are_each_found_and_no_other(tmp_path: Path) -> None:
    """A row of `entries` is found by the key's first 6 bytes: keys that share them (all
    but once in a few million saved prompts) share one row, and each gets its own entry;
    a key of that row that was not saved is a miss, never its neighbour's answer."""
    loaded = load([write_jsonl(tmp_path / "run.jsonl", [
        chat_record(f"question {i}", chat_response(f"answer {i}"), line=i + 1)
        for i in range(3)])], progress=False)
    run = loaded.index.models[MODEL]
    shared = b"\x07" * 6
    crafted = {shared + bytes([i]) * 10: value for i, value in
               enumerate(run.entries.values(), start=1)}
    run.entries = crafted
    index_file.write(loaded, tmp_path / "run.idx")
    stored = StoredIndex(tmp_path / "run.idx").models[MODEL].entries
    with sqlite3.connect(tmp_path / "run.idx") as db:
        assert db.execute("SELECT COUNT(*) FROM entries").fetchone() == (1,)
    db.close()
    for key, value in crafted.items():
        assert encode(stored.get(key)) == encode(value)  # type: ignore[arg-type]
    assert stored.get(shared + b"\x09" * 10) is None
    assert [k for k, _ in stored.items()] == sorted(crafted)


def test_writing_the_index_shows_its_progress_row_by_row(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """The write of a large run takes as long as its load: a bar counts its rows to the
    end (every entry, saved response and prompt), as the load's counts its bytes."""
    records = [chat_record(f"q{i}?", chat_response(f"a{i}"), line=i + 1) for i in range(5000)]
    write_jsonl(tmp_path / "run.jsonl", records)
    loaded = load([tmp_path / "run.jsonl"], progress=False)
    bars: list[tqdm[Any]] = []

    def shown(total: int, what: str, enabled: bool, unit: str = "B") -> tqdm[Any]:
        bars.append(tqdm(total=total, desc=what, unit=unit, file=io.StringIO()))
        return bars[-1]

    monkeypatch.setattr(index_file, "progress_bar", shown)
    index_file.write(loaded, tmp_path / "run.idx")
    [bar] = bars
    assert bar.desc == "writing the index" and bar.total == 2 * 5000  # entries and prompts
    assert bar.n == bar.total


def test_the_index_is_one_file_of_16k_pages_with_nothing_beside_it(built: Path) -> None:
    db = sqlite3.connect(f"file:{built}?mode=ro", uri=True)
    assert db.execute("PRAGMA page_size").fetchone() == (16384,)
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    db.close()
    assert [p.name for p in built.parent.iterdir()] == [built.name]  # no journal, no temp


@pytest.mark.http
def test_serving_the_index_answers_like_serving_the_files(built: Path) -> None:
    asks = [("Name a primary color in one word.", 2), ("Name a primary color in one word.", 1),
            ("Name a primary color in one word.", 1), ("Write a haiku about rescoring.", 1)]

    def answers(url: str) -> list[object]:
        with openai.OpenAI(base_url=url, api_key="x") as client:
            return asked(client)

    def asked(client: openai.OpenAI) -> list[object]:
        out: list[object] = []
        for text, n in asks:
            r = client.chat.completions.with_raw_response.create(
                model="demo/tiny-chat-model", messages=[{"role": "user", "content": text}], n=n)
            out.append((r.http_response.content, r.headers["x-replay-source"]))
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model="demo/tiny-chat-model",
                                           messages=[{"role": "user", "content": "Name a hue"}])
        out.append(e.value.message)
        return out

    with serving(SAVED) as files_url:
        from_files = answers(files_url)
    with serving([built]) as index_url:
        from_index = answers(index_url)
    assert from_index == from_files
    assert "first difference: message 0 (user), character 7" in str(from_index[-1])


def test_an_index_is_served_alone(built: Path) -> None:
    from replay_server.commands.serve import open_run

    with pytest.raises(LoadError, match="served on its own"):
        open_run([built, SAVED[0]], Settings())


def test_the_index_file_keeps_the_catalog_and_finds_the_same_nearest_prompt(
        tmp_path: Path) -> None:
    """The file's prompt table holds the in-memory catalog's rows in its order, and the
    one bisection over it finds what it finds in memory."""
    saved = write_jsonl(tmp_path / "run.jsonl", [
        chat_record(f"q{i % 37} {'x' * (i % 5)}", chat_response(f"a{i}"), line=i)
        for i in range(300)])
    loaded = load([saved, *SAVED], progress=False)
    index_file.write(loaded, tmp_path / "run.idx")
    stored = StoredIndex(tmp_path / "run.idx")
    assert set(stored.model_ids) == {model for model, _ in loaded.index.catalogs}
    for (model, kind), memory in loaded.index.catalogs.items():
        on_disk = stored.catalog(model, kind)
        assert list(on_disk.items()) == list(memory.items()) and len(on_disk) > 0
        for prompt, _ in list(memory.items())[::7]:
            for asked in (prompt, prompt[:-3] + b"zz" + prompt[-3:], prompt[:len(prompt) // 2]):
                assert on_disk.nearest(asked) == memory.nearest(asked)


def test_a_run_of_misses_reads_the_catalog_s_first_rows_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every miss's bisection reads the same middles of the catalog first: kept after the
    first miss, a later one reads only its last steps from the file, and finds the same
    nearest prompt as the catalog in memory."""
    saved = write_jsonl(tmp_path / "run.jsonl", [
        chat_record(f"question {i:05d}?", chat_response(f"a{i}"), line=i + 1)
        for i in range(4000)])
    loaded = load([saved], progress=False)
    index_file.write(loaded, tmp_path / "run.idx")
    stored = StoredIndex(tmp_path / "run.idx")
    [(model, kind)] = loaded.index.catalogs
    memory = loaded.index.catalogs[(model, kind)]
    reads: list[str] = []
    row = index_file.Pages.row

    def counted(pages: index_file.Pages, sql: str, args: tuple[Any, ...]) -> Any:
        reads.append(sql)
        return row(pages, sql, args)

    monkeypatch.setattr(index_file.Pages, "row", counted)
    read_by = []
    for asked in (b"question 01234x", b"question 02345x", b"question 03456x"):
        before = len(reads)
        probe = list(memory.items())[0][0].replace(b"question 00000?", asked)
        assert stored.catalog(model, kind).nearest(probe) == memory.nearest(probe)
        read_by.append(sum(1 for sql in reads[before:] if "SELECT prompt" in sql))
    assert read_by[0] > 10 and max(read_by[1:]) <= read_by[0] // 2, read_by


@pytest.mark.http
@pytest.mark.parametrize("damage", ["an answer's bytes", "a whole page"])
def test_what_a_damaged_index_cannot_read_is_a_precise_400(tmp_path: Path,
                                                            damage: str) -> None:
    """Never a damaged answer served, never a 500 (clients retry those); the message
    names the index file and how to rebuild it, and the server goes on serving the rest."""
    index = damaged_index(tmp_path, damage)
    refused = []
    with serving([index]) as url, httpx.Client(base_url=url, timeout=30) as http:
        for i in range(120):
            for text in (f"question {i}", f"question {i}?"):  # a hit, and a miss
                r = http.post("/chat/completions", json={"model": MODEL,
                                                         "messages": user(text)})
                if r.status_code == 200:
                    assert r.json()["choices"][0]["message"]["content"] == damaged_answer(i)
                    continue
                error = assert_error(r, 400)
                if error["code"] == "replay_unusable":
                    assert f"the index file {index} is damaged" in error["message"]
                    assert "replay-server index" in error["message"]
                    refused.append(text)
                else:
                    assert error["code"] == "replay_no_match" and text.endswith("?")
    assert ("question 57" if damage == "an answer's bytes" else "question 90") in refused
    assert len(refused) < 40


def test_a_damaged_table_read_at_start_is_refused(tmp_path: Path) -> None:
    """What is read at start (the models, the prompt ranges, meta) is checked whole."""
    index = damaged_index(tmp_path, "an answer's bytes")
    with sqlite3.connect(index) as db:
        db.execute("UPDATE models SET samples = samples - 1")
    db.close()
    with pytest.raises(LoadError, match="damaged"):
        StoredIndex(index)


def test_a_non_index_file_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "x.idx"
    fake.write_bytes(INDEX_MAGIC + b"\0" * 100)
    with pytest.raises(LoadError, match="not a replay-server index"):
        StoredIndex(fake)


def test_an_index_of_another_key_version_is_refused_saying_so(tmp_path: Path) -> None:
    """Its keys are another version's: none would ever match a request."""
    index = tmp_path / "run.idx"
    index_file.write(load([write_jsonl(tmp_path / "run.jsonl", [
        chat_record("q", chat_response("a"))])], progress=False), index)
    with sqlite3.connect(index) as db:
        db.execute("UPDATE meta SET value = '2' WHERE name = 'key_version'")
    db.close()
    with pytest.raises(LoadError) as refused:
        StoredIndex(index)
    message = str(refused.value)
    assert "key version 2" in message and f"version {KEY_VERSION}" in message
    assert "rebuild it" in message and str(index) in message


@pytest.mark.slow
@pytest.mark.http
def test_several_workers_share_one_index(tmp_path: Path) -> None:
    saved = write_jsonl(tmp_path / "run.jsonl", [
        chat_record(f"q{i}", chat_response(f"a{i}"), line=i) for i in range(50)])
    index = tmp_path / "run.idx"
    index_file.write(load([saved], progress=False), index)
    with spawn("serve", str(index), "--workers", "2", "--log-level", "warning") as server, \
            openai.OpenAI(base_url=server.url, api_key="x") as client:
        for i in range(50):
            r = client.chat.completions.create(model="test/model", messages=user(f"q{i}"))
            assert r.choices[0].message.content == f"a{i}"
        workers = subprocess.run(["pgrep", "-P", str(server.proc.pid)], capture_output=True,
                                 text=True).stdout.split()
        assert len(workers) >= 2


@pytest.mark.slow
def test_workers_serve_saved_files_through_their_index(tmp_path: Path) -> None:
    """Saved files are served through the index the cache keeps for them: several
    workers share it as they share an index file given."""
    saved = write_jsonl(tmp_path / "run.jsonl", [
        chat_record(f"q{i}", chat_response(f"a{i}"), line=i) for i in range(50)])
    with spawn("serve", str(saved), "--workers", "2", "--log-level", "warning") as server, \
            openai.OpenAI(base_url=server.url, api_key="x") as client:
        for i in range(50):
            r = client.chat.completions.create(model="test/model", messages=user(f"q{i}"))
            assert r.choices[0].message.content == f"a{i}"
    assert "replay-server: indexed into the cache: " in server.output


@pytest.mark.slow
def test_workers_are_refused_with_ordered_samples(built: Path) -> None:
    for run in ("examples", str(built)):  # saved files, and an index file
        ordered = subprocess.run([*CLI, "serve", run, "--workers", "2"],
                                 capture_output=True, text=True, cwd=ROOT)
        assert ordered.returncode == 2 and "serve this run with --workers 1" in ordered.stderr


def test_the_index_keeps_the_recorded_tokenizer_answers(tmp_path: Path) -> None:
    saved = write_jsonl(tmp_path / "run.jsonl", [
        chat_record("q", chat_response("a")),
        tokenizer_record("/tokenize", {"prompt": "Hello"},
                         {"count": 1, "max_model_len": 64, "tokens": [9]}, line=2),
        tokenizer_record("/detokenize", {"tokens": [9]}, {"prompt": "Hello"}, line=3),
        tokenizer_record("/detokenize", {"tokens": [9]}, {"prompt": "Hi"}, line=4)])
    out = tmp_path / "run.idx"
    loading = load([saved], progress=False)
    index_file.write(loading, out)
    loaded, stored = loading.index.models[MODEL], StoredIndex(out).models[MODEL]
    assert stored.tokenizer == loaded.tokenizer and len(stored.tokenizer) == 2
    assert None in stored.tokenizer.values()  # the detokenize recordings differ
    assert stored.max_model_len == loaded.max_model_len == 64
