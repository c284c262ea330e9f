"""[channels.NAME] settings: each kind read from the TOML file, secrets from systemd credentials, and
every setting that cannot work refused at load time with the key to fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from config.channels import NtfyChannel, TelegramChannel, WebhookChannel
from config.settings import load_settings
from daemon.cli import settings_problems

GOOD = """
notify_all_channels = ["ops"]

[channels.ops]
kind = "webhook"
url = "https://hooks.example.com/chartgen"
secret = "from-the-file"

[channels.phone]
kind = "telegram"
bot_token = "123:abc"
chat_id = 42

[channels.topic]
kind = "ntfy"
url = "https://ntfy.sh/chartgen-test"
"""


def _load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    f = tmp_path / "chartgen.toml"
    f.write_text(text)
    return load_settings(None, f)


def test_each_kind_is_read_from_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    s = _load(tmp_path, GOOD)
    ops, phone, topic = s.channels["ops"], s.channels["phone"], s.channels["topic"]
    assert isinstance(ops, WebhookChannel) and ops.secret is not None
    assert ops.secret.get_secret_value() == "from-the-file"
    assert isinstance(phone, TelegramChannel) and phone.chat_id == "42"
    assert phone.api_url == "https://api.telegram.org"
    assert isinstance(topic, NtfyChannel) and topic.token is None and topic.priority == 4
    assert s.notify_all_channels == ["ops"]
    assert "from-the-file" not in repr(s)


def test_systemd_credentials_fill_and_override_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "channel_ops_secret").write_text("from-credentials\n")
    (creds / "channel_topic_token").write_text("tk_cred")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    s = _load(tmp_path, GOOD)
    assert s.channels["ops"].secret.get_secret_value() == "from-credentials"  # type: ignore[union-attr]
    assert s.channels["topic"].token.get_secret_value() == "tk_cred"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('[channels.ops]\nkind = "webhook"\nurl = "https://h.example/x"\n', "channels.ops.secret is required"),
        ('[channels.tg]\nkind = "telegram"\nchat_id = "1"\n', "channels.tg.bot_token is required"),
        ('[channels.ops]\nkind = "pager"\nurl = "https://h.example/x"\n', "channels.ops"),
        ('[channels.ops]\nkind = "webhook"\nurl = "ftp://h"\nsecret = "s"\n', "channels.ops.webhook.url"),
        ('[channels.ops]\nkind = "webhook"\nurl = "https://h/x"\nsecret = "s"\nretries = 3\n', "retries"),
        ('notify_all_channels = ["ops"]\n', "notify_all_channels names 'ops'"),
        ('[channels."a b"]\nkind = "ntfy"\nurl = "https://ntfy.sh/x"\n', "channels.a b: a channel name"),
    ],
)
def test_a_channel_that_cannot_work_is_refused_naming_its_key(tmp_path: Path, text: str, named: str) -> None:
    with pytest.raises(ValidationError) as info:
        _load(tmp_path, text)
    message = settings_problems(info.value)
    assert named in message
    assert "\n" not in message and "input_value" not in message
