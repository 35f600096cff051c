"""The TOML config: the example is a valid file with every default; bad keys and values name the file, the key
and the allowed values; a named file that is missing is an error; one file serves many nodes by hostname."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiops.cli.main import main
from aiops.config import Config, NodeConfig, load_config, load_config_file, node_of
from aiops.config_example import example_toml
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
            '[[notify.webhooks]]\nurl = "http://x/"\nkind = "discord"\n',
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
        ('[node]\nname = "GPU_7"\n', "node.name"),
        ('[node]\nname = "-gpu7"\n', "node.name"),
        ('[node]\nname = "rack3"\n', "node.name"),
        ('[node]\nrack = "row b"\n', "node.rack"),
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


def test_node_name_is_any_rfc1123_host_name_and_a_bad_one_is_a_clear_error(tmp_path: Path) -> None:
    config = load_config_file(_file(tmp_path, '[node]\nname = "gpu-b200-a3"\nrack = "row-b-07"\n'))
    assert (node_of(config, "whatever").name, node_of(config, "whatever").rack) == ("gpu-b200-a3", "row-b-07")
    fqdn = load_config_file(_file(tmp_path, "[node]\nfqdn = true\n"))
    assert node_of(fqdn, "GPU-A100-017.dc1.example").name == "gpu-a100-017.dc1.example"
    assert NodeConfig(name="node0").name == "node0"  # the twin's names stay valid
    for bad, says in (
        ("gpu_b200", "RFC 1123 host name"),
        ("GPU-B200", "lowercase"),
        ("gpu-", "RFC 1123 host name"),
        ("a" * 64, "RFC 1123 host name"),
        ("fleet", "reserved"),
    ):
        with pytest.raises(ConfigError) as caught:
            load_config_file(_file(tmp_path, f'[node]\nname = "{bad}"\n'))
        message = str(caught.value)
        assert "field 'node.name'" in message and says in message and "\n" not in message, message
    with pytest.raises(ConfigError) as caught:
        load_config_file(_file(tmp_path, '[node]\nrack = "node3"\n'))
    assert "field 'node.rack'" in str(caught.value) and "reserved" in str(caught.value)


def test_run_hostname_stands_for_the_kernels_name_and_is_the_schedulers_name_of_the_host(
    tmp_path: Path,
) -> None:
    """`aiops run --hostname` (the chart passes the pod's spec.nodeName): the node is named by the usual rule
    from it, [node.hosts] is looked up by it, and the Kubernetes API is asked about the node by it."""
    from aiops.cli.main import build_parser
    from aiops.cli.run import configured
    from aiops.service.sources import kube_node_name

    path = _file(tmp_path, '[node.hosts]\n"gpu-a-17.dc1" = { name = "node17", rack = "rack2" }\n')

    def run_with(*argv: str) -> Config:
        return configured(build_parser().parse_args(["run", "--config", str(path), *argv]))

    config = run_with("--hostname", "GPU-A100-017.dc1.example")
    assert (config.node.name, config.node.rack) == ("gpu-a100-017", "rack0")
    assert kube_node_name(config) == "gpu-a100-017.dc1.example"  # the API's node, not the component
    listed = run_with("--hostname", "gpu-a-17.dc1")
    assert (listed.node.name, listed.node.rack, kube_node_name(listed)) == ("node17", "rack2", "gpu-a-17.dc1")
    path.write_text('[scheduler]\nnode_name = "k8s-name"\n')  # said in the file: the file's stands
    assert kube_node_name(run_with("--hostname", "gpu-b")) == "k8s-name"
    with pytest.raises(ConfigError) as caught:  # a pod whose $(NODE_NAME) was never set
        run_with("--hostname", "$(NODE_NAME)")
    assert "--hostname" in str(caught.value) and "'$(NODE_NAME)' is no host name" in str(caught.value)


def test_one_file_for_many_nodes_by_hostname(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        '[node]\nrack = "row-b"\n[node.hosts]\n"gpu-a-17" = { name = "node17", rack = "rack2" }\n'
        '"gpu-a-18" = { name = "gpu-b200-a3" }\n',
    )
    config = load_config_file(path)
    assert (node_of(config, "gpu-a-17").name, node_of(config, "gpu-a-17").rack) == ("node17", "rack2")
    assert (node_of(config, "gpu-a-18").name, node_of(config, "gpu-a-18").rack) == ("gpu-b200-a3", "rack0")
    stranger = node_of(
        config, "Stranger-01.dc1.example"
    )  # unlisted: runs, named after itself, in [node] rack
    assert (stranger.name, stranger.rack) == ("stranger-01", "row-b")
    with pytest.raises(ConfigError) as caught:
        node_of(config, "under_score")  # no RFC 1123 name: the error names the field to set
    assert "field 'node.name'" in str(caught.value) and "'under_score'" in str(caught.value)
    assert node_of(Config(), "gpu-a100-017.dc1.example").name == "gpu-a100-017"  # no file: its own
