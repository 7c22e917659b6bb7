"""Request signing as a hook: a function that takes an asset's href and returns the href to GET (`--sign`).

The Planetary Computer serves its blobs only with a SAS token in the URL, and a token lasts about 45 minutes; so the
href is signed again before every try (`eoscale.acquire.fetch`), never once for a whole run. `--sign` names the hook:
`planetary-computer` (the `planetary-computer` package's `sign`, installed by the user where the login node has
internet), or `MODULE:FUNCTION` for any other archive (a function `(href: str) -> str`, as odc-stac's `patch_url`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from eoscale.errors import InputError

Sign = Callable[[str], str]
NAMED = {"planetary-computer": ("planetary_computer", "sign", "pip install planetary-computer")}


def resolve(name: str | None) -> Sign | None:
    """The signing function `name` stands for (see the module docstring); None for no signing."""
    if not name:
        return None
    if name in NAMED:
        module_name, attribute, install = NAMED[name]
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            raise InputError(f"--sign {name} needs the {module_name!r} package: {install}") from None
        return getattr(module, attribute)
    module_name, _, attribute = name.partition(":")
    if not module_name or not attribute:
        raise InputError(f"--sign {name!r} is neither {' nor '.join(NAMED)} nor MODULE:FUNCTION (a function that takes "
                         f"an href and returns the signed href)")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise InputError(f"--sign {name!r}: module {module_name!r} cannot be imported ({err})") from None
    sign = getattr(module, attribute, None)
    if not callable(sign):
        raise InputError(f"--sign {name!r}: module {module_name!r} has no function {attribute!r}")
    return sign
