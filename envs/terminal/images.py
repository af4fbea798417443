"""Task images, built locally: no image registry is needed (or reachable).

The one image, `gemkit/terminal:busybox`, is a root file system holding a statically linked
BusyBox (Debian's `busybox-static`) and a link for each of its applets (`sh`, `awk`, `sed`,
`grep`, `sort`, `tar`, ...), and two unprivileged users: `agent`, who runs the episode's
commands, and `grader`, who runs the task's tests; it is loaded with `docker import`. It builds in about a second and
weighs 2 MB; a build is skipped when an image of the same recipe and binary already exists.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import shutil
import subprocess
import tarfile
import threading
import time
from pathlib import Path
from typing import Any, Literal

from gemkit.errors import GemkitError

log = logging.getLogger(__name__)

REPOSITORY = "gemkit/terminal"
#: image name in a task file -> local tag
IMAGES = {"busybox": f"{REPOSITORY}:busybox"}
#: bump when the root file system below changes, so existing images are rebuilt
RECIPE_VERSION = "2"
BUSYBOX_PATHS = ("/bin/busybox", "/usr/bin/busybox")
#: uids of the two users; the backends use the same numbers
AGENT_UID, GRADER_UID = 10000, 10001
PASSWD = (
    "root:x:0:0:root:/root:/bin/sh\n"
    f"agent:x:{AGENT_UID}:{AGENT_UID}:agent:/work:/bin/sh\n"
    f"grader:x:{GRADER_UID}:{GRADER_UID}:grader:/tmp:/bin/sh\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
)
GROUP = f"root:x:0:\nagent:x:{AGENT_UID}:\ngrader:x:{GRADER_UID}:\nnogroup:x:65534:\n"

_lock = threading.Lock()


class ImageError(GemkitError):
    """A task image cannot be built (no static BusyBox, no Docker engine)."""


def _is_static_elf(path: str) -> bool:
    """True when `path` is an ELF executable without a program interpreter (statically linked)."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:  # 64-bit ELF only
            return False
        order: Literal["little", "big"] = "little" if head[5] == 1 else "big"
        phoff = int.from_bytes(head[32:40], order)
        phentsize = int.from_bytes(head[54:56], order)
        phnum = int.from_bytes(head[56:58], order)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    for i in range(phnum):
        if int.from_bytes(table[i * phentsize : i * phentsize + 4], order) == 3:  # PT_INTERP
            return False
    return True


def find_busybox() -> str:
    """The path of a statically linked BusyBox on this machine (`GEMKIT_BUSYBOX` overrides)."""
    candidates = [os.environ["GEMKIT_BUSYBOX"]] if os.environ.get("GEMKIT_BUSYBOX") else []
    candidates += [*BUSYBOX_PATHS, shutil.which("busybox") or ""]
    dynamic = []
    for path in candidates:
        if path and os.path.isfile(path):
            if _is_static_elf(path):
                return path
            dynamic.append(path)
    if dynamic:
        raise ImageError(
            f"{dynamic[0]} is a dynamically linked BusyBox, which cannot run alone in an image; "
            "install the static one (Debian/Ubuntu: apt-get install busybox-static)"
        )
    raise ImageError(
        "no BusyBox found to build the terminal task image; install it "
        "(Debian/Ubuntu: apt-get install busybox-static) or set GEMKIT_BUSYBOX to a static binary"
    )


def _applets(busybox: str) -> list[str]:
    """Install paths of the applets (`usr/bin/awk`, `bin/sh`, ...) this BusyBox provides."""
    out = subprocess.run([busybox, "--list-full"], capture_output=True, text=True, timeout=30)
    if out.returncode != 0 or not out.stdout.strip():
        raise ImageError(f"{busybox} --list-full failed: {out.stderr.strip() or 'no output'}")
    return [p.strip("/") for p in out.stdout.split() if p.strip("/") and not p.endswith("/")]


def busybox_digest(busybox: str) -> str:
    """A short digest of the BusyBox binary and the recipe: the image's identity."""
    h = hashlib.sha256(RECIPE_VERSION.encode())
    h.update(Path(busybox).read_bytes())
    return h.hexdigest()[:12]


def busybox_rootfs(busybox: str) -> bytes:
    """A tar archive of the image's root file system."""
    buf = io.BytesIO()
    now = int(time.time())

    def add_dir(tar: tarfile.TarFile, name: str, mode: int = 0o755) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, now
        tar.addfile(info)

    def add_file(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), mode, now
        tar.addfile(info, io.BytesIO(data))

    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in ("bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "proc", "sys", "dev"):
            add_dir(tar, d)
        add_dir(tar, "tmp", 0o1777)
        add_dir(tar, "work", 0o777)
        add_file(tar, "bin/busybox", Path(busybox).read_bytes(), 0o755)
        for path in _applets(busybox):
            if path == "bin/busybox":
                continue
            link = tarfile.TarInfo(path)
            link.type, link.linkname, link.mtime = tarfile.SYMTYPE, "/bin/busybox", now
            tar.addfile(link)
        add_file(tar, "etc/passwd", PASSWD.encode())
        add_file(tar, "etc/group", GROUP.encode())
    return buf.getvalue()


def docker_client(timeout: int = 120) -> Any:
    """A Docker SDK client for the local engine, or an `ImageError` that says why not."""
    try:
        import docker
    except ImportError as e:  # pragma: no cover - docker is a core dependency
        raise ImageError("the Docker SDK is missing: pip install docker") from e
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except Exception as e:
        raise ImageError(
            f"no Docker engine answers ({type(e).__name__}: {e}); start one (dockerd) or use "
            "backend='bwrap'"
        ) from e
    return client


def image_exists(client: Any, ref: str) -> bool:
    """True when the engine holds an image called `ref`."""
    import docker

    try:
        client.images.get(ref)
        return True
    except docker.errors.ImageNotFound:
        return False


def build_images(client: Any = None, *, force: bool = False) -> dict[str, str]:
    """Build every task image that is missing (or all with `force`); return name -> tag.

    Idempotent and safe to call from several threads: an image of the same recipe and BusyBox
    binary is reused. The image also gets a content tag (`busybox-<digest>`).
    """
    with _lock:
        client = client or docker_client()
        busybox = find_busybox()
        digest = busybox_digest(busybox)
        exact = f"{REPOSITORY}:busybox-{digest}"
        if force or not image_exists(client, exact):
            start = time.monotonic()
            client.api.import_image_from_data(
                busybox_rootfs(busybox), repository=REPOSITORY, tag=f"busybox-{digest}"
            )
            log.info("built %s in %.1f s", exact, time.monotonic() - start)
        image = client.images.get(exact)
        if IMAGES["busybox"] not in image.tags:
            image.tag(REPOSITORY, "busybox")
        return dict(IMAGES)


def ensure_image(client: Any, name: str) -> str:
    """The local tag of task image `name`, building the images first if it is missing."""
    if name not in IMAGES:
        raise ImageError(f"unknown task image {name!r}; known images: {sorted(IMAGES)}")
    ref = IMAGES[name]
    if not image_exists(client, ref):
        build_images(client)
    return ref


if __name__ == "__main__":  # `python -m gemkit.envs.terminal.images` builds them at set-up time
    logging.basicConfig(level=logging.INFO)
    for _name, _tag in build_images().items():
        log.info("%s -> %s", _name, _tag)
