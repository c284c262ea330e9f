"""[channels.NAME] settings: each kind read from the TOML file, secrets from systemd credentials, and
every setting that cannot work refused at load time with the key to fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from config.channels import NtfyChannel, TelegramChannel, WebhookChannel
from config.settings import load_settings, settings_problems

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
        ('[channels.t]\nkind = "ntfy"\nurl = "https://ntfy.sh/x"\nmax_per_minute = 0\n', "max_per_minute"),
        ('[channels.t]\nkind = "ntfy"\nurl = "https://ntfy.sh/x"\nsubscribers = [" "]\n', "subscribers"),
    ],
)
def test_a_channel_that_cannot_work_is_refused_naming_its_key(tmp_path: Path, text: str, named: str) -> None:
    with pytest.raises(ValidationError) as info:
        _load(tmp_path, text)
    message = settings_problems(info.value)
    assert named in message
    assert "\n" not in message and "input_value" not in message


def test_rate_and_grants_default_to_the_service_limits_and_nobody(tmp_path: Path) -> None:
    s = _load(tmp_path, GOOD)
    assert [s.channels[n].rate_per_minute for n in ("ops", "phone", "topic")] == [60, 20, 12]
    assert all(ch.subscribers == [] and not ch.allow_private_address for ch in s.channels.values())
    assert not s.channels["ops"].may_subscribe("tok_1", frozenset({"desk"}))
    granted = _load(tmp_path, GOOD.replace('secret = "from-the-file"', 'secret = "x"\nsubscribers = ["desk"]'))
    assert granted.channels["ops"].may_subscribe("tok_1", frozenset({"desk"}))
    assert not granted.channels["ops"].may_subscribe("tok_2")


@pytest.mark.parametrize(
    ("key", "url", "host"),
    [
        ("url", "http://127.0.0.1:8080/hook", "127.0.0.1"),
        ("url", "https://10.1.2.3/hook", "10.1.2.3"),
        ("url", "https://192.168.1.20/hook", "192.168.1.20"),
        ("url", "http://169.254.169.254/latest/meta-data", "169.254.169.254"),
        ("url", "http://[::1]:9/x", "::1"),
        ("url", "http://[::ffff:10.0.0.1]/x", "::ffff:10.0.0.1"),
        ("url", "http://[fd00::1]/x", "fd00::1"),
        ("url", "http://localhost:9/x", "localhost"),
        ("url", "http://hooks.localhost/x", "hooks.localhost"),
        ("url", "http://0.0.0.0/x", "0.0.0.0"),
        ("api_url", "http://127.0.0.1:8081", "127.0.0.1"),
    ],
)
def test_a_private_address_is_refused_at_start_unless_allowed(tmp_path: Path, key: str, url: str, host: str) -> None:
    """Regression (issue 36): a channel URL on a loopback, link-local or private address was accepted."""
    if key == "url":
        table = f'[channels.ops]\nkind = "webhook"\nurl = "{url}"\nsecret = "s"\n'
    else:
        table = f'[channels.ops]\nkind = "telegram"\napi_url = "{url}"\nbot_token = "1:t"\nchat_id = "1"\n'
    with pytest.raises(ValidationError) as info:
        _load(tmp_path, table)
    message = settings_problems(info.value)
    assert f"channels.ops.{key} is on a loopback, link-local or private address ({host})" in message
    assert "channels.ops.allow_private_address = true" in message
    allowed = _load(tmp_path, table + "allow_private_address = true\n")
    assert allowed.channels["ops"].allow_private_address
