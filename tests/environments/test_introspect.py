import pytest

from mcp_rl.environments.discovery import scan
from mcp_rl.environments.introspect import read_config_spec
from mcp_rl.errors import UserError
from tests.conftest import FIXTURES


def _env(name, folder="good"):
    return scan([FIXTURES / "envs" / folder]).get(name)


def test_config_init_values_and_schema(settings):
    spec = read_config_spec(settings, _env("counting"))
    assert spec.source == "config_init"
    assert spec.config_class == "CountingConfig"
    max_count = spec.field("max_count")
    assert max_count.initial == 20 and max_count.default == 10
    assert max_count.json_schema["maximum"] == 100
    assert spec.field("group_size").initial == 4


def test_config_init_raising_falls_back_with_reason(settings):
    spec = read_config_spec(settings, _env("raising"))
    assert spec.source == "fallback"
    assert spec.config_class == "BaseEnvConfig"
    assert "needs configs/default.yaml" in spec.fallback_reason
    assert spec.field("group_size") is not None


def test_import_error_is_a_clear_user_error(settings):
    with pytest.raises(UserError, match="module_that_does_not_exist"):
        read_config_spec(settings, _env("import_fails", "broken"))


def test_cached_by_content_and_reread_after_edit(settings, tmp_path, monkeypatch):
    from mcp_rl.environments import introspect

    folder = tmp_path / "envs"
    folder.mkdir()
    source = (FIXTURES / "envs" / "good" / "counting.py").read_text()
    (folder / "counting.py").write_text(source)
    env = scan([folder]).get("counting")
    read_config_spec(settings, env)
    asked = introspect._ask
    with monkeypatch.context() as patch:
        # Cached: no child process is asked (a proven condition, not a machine's speed).
        patch.setattr(introspect, "_ask", lambda *a, **k: pytest.fail("asked a child for a cached spec"))
        assert read_config_spec(settings, env).field("max_count").initial == 20
    assert introspect._ask is asked
    (folder / "counting.py").write_text(source.replace("max_count=20", "max_count=30"))
    assert read_config_spec(settings, env).field("max_count").initial == 30


def test_deadline(settings, tmp_path):
    folder = tmp_path / "slow"
    folder.mkdir()
    (folder / "slow.py").write_text(
        "import time\nfrom atroposlib.envs.base import BaseEnv\n"
        "class Slow(BaseEnv):\n    name = 'slow'\n"
        "    @classmethod\n    def config_init(cls):\n        time.sleep(60)\n"
    )
    fast = settings.model_copy(update={"introspect_timeout_s": 6.0})
    with pytest.raises(UserError, match="took longer than 6 s"):
        read_config_spec(fast, scan([folder]).get("slow"))
