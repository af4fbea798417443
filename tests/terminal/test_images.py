"""Task images: built locally from the host's static BusyBox, once, and holding its applets."""

from __future__ import annotations

import io
import tarfile

import pytest

from gemkit.envs.terminal import images
from gemkit.envs.terminal.images import ImageError, build_images, busybox_rootfs, docker_client


def _busybox_or_skip() -> str:
    try:
        return images.find_busybox()
    except ImageError as e:
        pytest.skip(f"no static BusyBox on this machine: {e}")


def test_the_root_file_system_holds_busybox_its_applets_and_writable_mount_points():
    busybox = _busybox_or_skip()
    with tarfile.open(fileobj=io.BytesIO(busybox_rootfs(busybox))) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["bin/busybox"].isfile() and members["bin/busybox"].mode == 0o755
    for applet in ("bin/sh", "usr/bin/awk", "bin/sed", "bin/grep", "usr/bin/sort", "bin/tar"):
        assert members[applet].issym() and members[applet].linkname == "/bin/busybox", applet
    assert members["tmp"].mode == 0o1777 and members["work"].isdir()


def test_a_dynamically_linked_busybox_is_refused_with_the_package_to_install(monkeypatch):
    monkeypatch.setenv("GEMKIT_BUSYBOX", "/usr/bin/env")  # any dynamically linked program
    monkeypatch.setattr(images, "BUSYBOX_PATHS", ())
    monkeypatch.setattr(images.shutil, "which", lambda _: None)
    with pytest.raises(ImageError, match="apt-get install busybox-static"):
        images.find_busybox()


def test_building_twice_keeps_the_same_image(docker_backend):
    client = docker_client()
    first = build_images(client)
    image_id = client.images.get(first["busybox"]).id
    second = build_images(client)
    assert first == second == {"busybox": "gemkit/terminal:busybox"}
    assert client.images.get(second["busybox"]).id == image_id


def test_a_forced_build_makes_an_image_that_runs_the_tools(docker_backend):
    client = docker_client()
    tag = build_images(client, force=True)["busybox"]
    out = client.containers.run(
        tag,
        ["sh", "-c", "echo b a | tr ' ' '\\n' | sort | awk '{print NR, $0}'"],
        remove=True,
        network_mode="none",
    )
    assert out == b"1 a\n2 b\n"
