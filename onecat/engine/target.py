"""The platform the engine image runs: the interpreter and machine every pin is made for."""

from __future__ import annotations

from dataclasses import dataclass

from packaging.tags import Tag, compatible_tags, cpython_tags


@dataclass(frozen=True)
class Target:
    """CPython `python` on x86_64 Linux with glibc `glibc` (uv's --python-platform)."""

    python: str = "3.12"
    glibc: tuple[int, int] = (2, 28)
    machine: str = "x86_64"

    @property
    def uv_platform(self) -> str:
        return f"{self.machine}-manylinux_{self.glibc[0]}_{self.glibc[1]}"

    @property
    def version(self) -> tuple[int, int]:
        major, minor = self.python.split(".")[:2]
        return int(major), int(minor)

    def marker_environment(self) -> dict[str, str]:
        """PEP 508 marker variables of the image's interpreter (no extras requested)."""
        full = f"{self.python}.0" if self.python.count(".") == 1 else self.python
        return {
            "implementation_name": "cpython",
            "implementation_version": full,
            "os_name": "posix",
            "platform_machine": self.machine,
            "platform_python_implementation": "CPython",
            "platform_release": "",
            "platform_system": "Linux",
            "platform_version": "",
            "python_full_version": full,
            "python_version": ".".join(full.split(".")[:2]),
            "sys_platform": "linux",
            "extra": "",
        }

    def platforms(self) -> list[str]:
        """Platform tags a wheel may carry to install here, most specific first."""
        major, minor = self.glibc
        many = [f"manylinux_{major}_{m}_{self.machine}" for m in range(minor, 4, -1)]
        legacy = {(2, 17): "manylinux2014", (2, 12): "manylinux2010", (2, 5): "manylinux1"}
        many += [f"{name}_{self.machine}" for (ma, mi), name in legacy.items()
                 if (ma, mi) <= self.glibc]
        return [*many, f"linux_{self.machine}"]

    def tags(self) -> set[Tag]:
        platforms = self.platforms()
        major, minor = self.version
        return (set(cpython_tags(self.version, platforms=platforms))
                | set(compatible_tags(self.version, interpreter=f"cp{major}{minor}",
                                      platforms=platforms)))

    def describe(self) -> str:
        return f"CPython {self.python} on {self.uv_platform}"


IMAGE = Target()
