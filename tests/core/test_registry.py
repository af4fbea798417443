"""Registry: id grammar, lookups with suggestions, listing, entry-point plugins."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap

import pytest

import gemkit
from gemkit.errors import InvalidEnvIdError, RegistrationError, UnknownEnvError
from gemkit.registry import parse_id


@pytest.mark.parametrize(
    "env_id,parts",
    [
        ("game:GuessTheNumber-v0-easy", ("game", "GuessTheNumber", 0, "easy")),
        ("rg:leg_counting", ("rg", "leg_counting", None, None)),
        ("toolworld:TripPlanning-v0", ("toolworld", "TripPlanning", 0, None)),
        ("math:Arithmetic-v12-hard", ("math", "Arithmetic", 12, "hard")),
    ],
)
def test_id_grammar(env_id, parts):
    p = parse_id(env_id)
    assert (p["family"], p["name"], p["version"], p["level"]) == parts


@pytest.mark.parametrize("bad", ["GuessTheNumber", "Game:X-v0", ":x", "game:", "game:a b"])
def test_malformed_ids_say_the_expected_form(bad):
    with pytest.raises(InvalidEnvIdError, match="family:Name-vN"):
        parse_id(bad)


def test_unknown_id_names_the_closest_ids():
    with pytest.raises(UnknownEnvError) as e:
        gemkit.make("game:GuessTheNumbr-v0-easy")
    assert "game:GuessTheNumber-v0-easy" in str(e.value)


def test_listing_has_descriptions_and_tags():
    games = gemkit.list_envs("game")
    assert games and all(s.description and "game" in s.tags for s in games)
    assert [s.id for s in games] == sorted(s.id for s in games)
    assert {s.id for s in gemkit.list_envs(tag="easy")} >= {"game:GuessTheNumber-v0-easy"}


def test_register_refuses_silent_override():
    gemkit.register("test:Dup-v0", "gemkit.envs.games.guess_the_number:GuessTheNumber")
    with pytest.raises(RegistrationError, match="override=True"):
        gemkit.register("test:Dup-v0", "gemkit.envs.games.guess_the_number:GuessTheNumber")
    gemkit.register(
        "test:Dup-v0", "gemkit.envs.games.guess_the_number:GuessTheNumber", override=True
    )


def test_constructors_take_no_hidden_seed():
    for s in gemkit.list_envs("game"):
        cls = s.make().unwrapped.__class__
        assert "seed" not in inspect.signature(cls.__init__).parameters, s.id


def test_make_passes_kwargs_and_sets_spec():
    env = gemkit.make("game:GuessTheNumber-v0-easy", high=7)
    assert env.unwrapped.high == 7 and env.spec.id == "game:GuessTheNumber-v0-easy"


def test_entry_point_plugin_from_an_installed_package(tmp_path):
    pkg = tmp_path / "src"
    (pkg / "gemkit_plugin_demo").mkdir(parents=True)
    (pkg / "gemkit_plugin_demo" / "__init__.py").write_text(
        textwrap.dedent(
            """
            from gemkit import register
            from gemkit.core import Env

            class Echo(Env):
                def reset(self, *, seed=None, options=None):
                    super().reset(seed=seed)
                    return "say something", {}

                def step(self, action):
                    return "you said " + action, 1.0, True, False, {"success": True}

            def register_envs():
                register("plugin:Echo-v0", Echo, description="Echoes the action.")
            """
        )
    )
    (pkg / "pyproject.toml").write_text(
        textwrap.dedent(
            """
            [build-system]
            requires = ["setuptools"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "gemkit-plugin-demo"
            version = "0.0.1"

            [project.entry-points."gemkit.envs"]
            demo = "gemkit_plugin_demo:register_envs"
            """
        )
    )
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(pkg),
        ],
        check=True,
        capture_output=True,
    )
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(target)!r})
        import gemkit
        env = gemkit.make("plugin:Echo-v0")
        env.reset(seed=0)
        print(env.step("hi")[0], [s.id for s in gemkit.list_envs("plugin")])
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "you said hi ['plugin:Echo-v0']"
