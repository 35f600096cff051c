"""The TOML config: the example is a valid file with every default; bad keys and values name the file, the key
and the allowed values; a named file that is missing is an error; one file serves many nodes by hostname."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiops.cli.main import main
from aiops.config import Config, example_toml, load_config, load_config_file, node_of
from aiops.errors import ConfigError


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "aiops.toml"
    path.write_text(text)
    return path


def test_the_example_is_every_default_and_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, example_toml())
    assert load_config_file(path).model_dump() == Config().model_dump()
    assert main(["config", "check", str(path)]) == 0
    assert "ok" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "key", "allowed"),
    [
        ("[store]\nretention_dayz = 3\n", "store.retention_dayz", "retention_days"),
        ("[collectors.nvml]\ninterval = 1\n", "collectors.nvml.interval", "interval_s"),
        (
            '[[notify.webhooks]]\nurl = "http://x/"\nkind = "teams"\n',
            "notify.webhooks[0].kind",
            "alertmanager",
        ),
        ('[dcim]\nactuator = "ipmi"\n', "dcim.actuator", "nvml"),
        ('[node.hosts]\n"gpu-a" = { name = "node1", rak = "rack0" }\n', "node.hosts.gpu-a.rak", "rack"),
    ],
)
def test_an_unknown_key_or_value_names_file_key_and_allowed(
    tmp_path: Path, text: str, key: str, allowed: str
) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config_file(path)
    message = str(caught.value)
    assert str(path) in message and key in message and allowed in message, message


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('[node]\nname = "gpu7"\n', "node.name"),
        ("[store]\nretention_days = -1\n", "store.retention_days"),
        ('[http]\nlisten = "nowhere"\n', "http.listen"),
        ('[[notify.webhooks]]\nurl = "ftp://x/"\n', "notify.webhooks[0].url"),
        ("[store\n", "(file)"),
    ],
)
def test_a_bad_value_is_refused_with_its_key(tmp_path: Path, text: str, key: str) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")):
        load_config_file(path)
    assert main(["config", "check", str(path)]) == 2


def test_a_named_file_must_exist_but_no_file_means_defaults(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "absent.toml")
    with pytest.raises(ConfigError, match="no such file"):
        load_config(None, {"AIOPS_CONFIG": str(tmp_path / "absent.toml")})
    assert load_config(None, {}).model_dump(exclude={"store"}) == Config().model_dump(exclude={"store"})


def test_one_file_for_many_nodes_by_hostname(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        '[node.hosts]\n"gpu-a-17" = { name = "node17", rack = "rack2" }\n"gpu-a-18" = { name = "node18" }\n',
    )
    config = load_config_file(path)
    assert (node_of(config, "gpu-a-17").name, node_of(config, "gpu-a-17").rack) == ("node17", "rack2")
    assert (node_of(config, "gpu-a-18").name, node_of(config, "gpu-a-18").rack) == ("node18", "rack0")
    with pytest.raises(ConfigError) as caught:
        node_of(config, "stranger")
    assert "'stranger' is not listed" in str(caught.value) and "gpu-a-17" in str(caught.value)
    assert node_of(Config(), "anything").name == "node0"  # no table: [node] as written
