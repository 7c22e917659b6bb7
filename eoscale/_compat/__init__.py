"""Every use of another library's private API, and every patch of one, in one place.

eoscale leans on torch, Lightning, DeepSpeed, Ray, zarr and PyTriton, and in a few places it needs what they do
not publish (a DataLoader internal, a zarr codec attribute, a DeepSpeed class method, a PyTriton source file).
Each such use lives in a module of this package named for the library (`eoscale._compat.zarr`, …) that

- says which versions it was checked on (`CHECKED`, a `Checked` per library),
- is the only place in eoscale that touches the private name,
- has its own test (`tests/_compat/`), which fails when an upgrade moves the name.

Outside a checked version a module either falls back to the public path and says so once (`warn_once`), or fails
in one line naming the package, its version and the range eoscale was checked on (`UnsupportedVersionError`),
never silently. Importing this package imports none of those libraries.

Optional extras: DeepSpeed, Ray and PyTriton are `eoscale[deepspeed]`, `eoscale[ray]` and `eoscale[serve]`;
`require_extra` imports one and, when it is missing, raises a one-line error naming the extra to install.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import warnings
from dataclasses import dataclass
from types import ModuleType

from eoscale.errors import UserError

__all__ = ["Checked", "UnsupportedVersionError", "MissingExtraError", "require_extra", "version_tuple", "warn_once"]


class UnsupportedVersionError(UserError, RuntimeError):
    """An installed library outside the versions an eoscale private-API use was checked on."""


class MissingExtraError(UserError, ImportError):
    """A command needs an optional dependency (an extra) that is not installed."""


def version_tuple(text: str) -> tuple[int, ...]:
    """(major, minor, patch) of a version string; local and pre-release parts are ignored."""
    return tuple(int(part) for part in re.findall(r"\d+", text.split("+")[0])[:3])


@dataclass(frozen=True)
class Checked:
    """The versions of `package` (its distribution name) a private-API use was checked on: `low <= v < high`."""

    package: str
    low: str
    high: str
    what: str  # the private names relied on, for the messages

    def installed(self) -> str | None:
        try:
            return importlib.metadata.version(self.package)
        except importlib.metadata.PackageNotFoundError:
            return None

    def holds(self, version: str | None = None) -> bool:
        """Whether `version` (default: the installed one) is within the checked range."""
        version = self.installed() if version is None else version
        if version is None:
            return False
        have = version_tuple(version)
        return version_tuple(self.low) <= have and have[: len(version_tuple(self.high))] < version_tuple(self.high)

    @property
    def range(self) -> str:
        return f">={self.low},<{self.high}"

    def require(self) -> None:
        """Raise `UnsupportedVersionError` (one line) unless the installed version is in range."""
        if not self.holds():
            raise UnsupportedVersionError(
                f"{self.package} {self.installed()} is outside {self.range}, the versions eoscale's use of "
                f"{self.what} was checked on: install {self.package}{self.range} (pip install '{self.package}{self.range}')")

    def allowed(self, fallback: str) -> bool:
        """`holds()`, else warn once that eoscale uses `fallback` instead, and return False."""
        if self.holds():
            return True
        warn_once(f"{self.package}-{self.installed()}-{self.what}",
                  f"{self.package} {self.installed()} is outside {self.range}, the versions eoscale's use of "
                  f"{self.what} was checked on: {fallback}")
        return False


_WARNED: set[str] = set()


def warn_once(key: str, message: str, *, stacklevel: int = 3) -> None:
    """A `UserWarning` with `message` the first time `key` is seen in this process."""
    if key in _WARNED:
        return
    _WARNED.add(key)
    warnings.warn(message, stacklevel=stacklevel)


# extra -> (the module a command imports, what it is for, how to install it)
EXTRAS: dict[str, tuple[str, str, str]] = {
    "deepspeed": ("deepspeed", "DeepSpeed ZeRO-2/3 strategies (configs/strategy/zero*.yaml)",
                  "DS_BUILD_OPS=0 pip install 'eoscale[deepspeed]'"),
    "ray": ("ray.train", "the Ray Train launcher (--launcher ray)", "pip install 'eoscale[ray]'"),
    # PyTriton declares numpy<2 but runs under numpy 2 with eoscale's patch (eoscale._compat.pytriton)
    "serve": ("pytriton", "Triton Inference Server (eoscale serve)",
              "pip install 'eoscale[serve]' && pip install --no-deps nvidia-pytriton==0.7.0"),
}


def require_extra(extra: str) -> ModuleType:
    """Import the module behind optional extra `extra`, or raise `MissingExtraError` saying what to install."""
    module, purpose, install = EXTRAS[extra]
    try:
        return importlib.import_module(module)
    except ImportError as err:
        if err.name is not None and not module.startswith(err.name.split(".")[0]):
            raise  # the extra is there but something it needs is broken: a bug, keep the traceback
        raise MissingExtraError(
            f"{purpose} need the '{extra}' extra, which is not installed: {install} "
            f"(bash scripts/setup.sh installs every extra)") from None
