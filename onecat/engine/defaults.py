"""What the serve role pins for the engine, read from its defaults (one home for each value).

roles/vllm_serve/defaults/main.yml holds the engine release, the wheel URL pattern, the known
wheel SHA256s, the base image, torch's spec and index; the lock command's defaults are those.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import yaml

from .errors import EngineLockError

REPO = Path(__file__).resolve().parents[2]
ROLE_DEFAULTS = REPO / "roles" / "vllm_serve" / "defaults" / "main.yml"
ENGINE = "1cat-vllm"


@dataclass(frozen=True)
class RoleDefaults:
    engine_version: str
    wheel_url_template: str
    wheel_sha256s: dict[str, str]
    base: str
    torch_spec: str
    torch_index_url: str
    pip_index_url: str

    def wheel_url(self, version: str) -> str:
        return _render(self.wheel_url_template, {"vllm_serve_engine_version": version})


def _render(template: str, context: dict[str, Any]) -> str:
    return jinja2.Environment(undefined=jinja2.Undefined).from_string(template) \
        .render(context).strip()


def read(path: Path = ROLE_DEFAULTS) -> RoleDefaults:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise EngineLockError(f"the serve role's defaults {path} cannot be read: {err}") from None
    try:
        return RoleDefaults(
            engine_version=_render(str(data["vllm_serve_engine_version"]), {}),
            wheel_url_template=str(data["vllm_serve_wheel_url"]),
            wheel_sha256s={str(k): str(v).lower()
                           for k, v in (data["vllm_serve_wheel_sha256s"] or {}).items()},
            base=str(data["vllm_serve_image_base"]),
            torch_spec=str(data["vllm_serve_image_torch_spec"] or ""),
            torch_index_url=str(data["vllm_serve_image_torch_index_url"] or ""),
            pip_index_url=str(data["vllm_serve_image_pip_index_url"] or ""),
        )
    except (KeyError, TypeError, AttributeError) as err:
        raise EngineLockError(f"the serve role's defaults {path} lack {err}") from None


def lock_path(version: str, root: Path = REPO) -> Path:
    """Where the lock of an engine release lives: next to the inventory, meant to be committed."""
    return root / "inventory" / "engine" / f"{ENGINE}-{version}.lock.json"


def cache_dir(root: Path = REPO) -> Path:
    return root / ".cache" / "engine"
