"""``charfmt render --say`` with a user block: its emotions are checked as the shorthand's are."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT

from charfmt.cli import main

MIO = str(ROOT / "examples" / "characters" / "mio.toml")


@pytest.mark.parametrize(
    ("say", "warned"),
    [
        ('<user_chats><chat type="C"><emo>bogus</emo><msg>hi</msg></chat></user_chats>', "<emo>bogus</emo>"),
        ("[bogus] hi", "[bogus]"),
        ('<user_chats><chat type="C"><emo>joy</emo><msg>hi</msg></chat></user_chats>', None),
    ],
)
def test_an_emotion_the_character_lacks_warns_in_a_block_as_in_shorthand(
    say: str, warned: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a newcomer's trial: the block's ``<emo>bogus</emo>`` passed with no diagnostic."""
    assert main(["render", "--character", MIO, "--say", say]) == 0
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if "CF401" in line]
    assert lines == ([] if warned is None else [lines[0]]) and (warned is None or warned in lines[0]), captured.err
    if warned is not None:
        assert lines[0].startswith(f"charfmt: --say:1:{say.index(warned) + 1}: CF401 warning")
    assert json.loads(captured.out)["messages"][-1]["role"] == "user"


def test_an_alias_in_a_block_is_sent_as_its_key() -> None:
    say = '<user_chats><chat type="C"><emo>happy</emo><msg>hi</msg></chat></user_chats>'  # (mio: joy's alias)
    out = subprocess.run([sys.executable, "-m", "charfmt", "render", "--character", MIO, "--say", say],
                         check=False, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0 and "CF401" not in out.stderr, out.stderr
    assert "<emo>joy</emo>" in json.loads(out.stdout)["messages"][-1]["content"]
