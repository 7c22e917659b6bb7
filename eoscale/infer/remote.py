"""`eoscale predict --server`: the forward passes of prediction done by a model that `eoscale serve` serves.

    model = connect_model("http://node12:8000", "landcover")     # or grpc://node12:8001
    predict_blocks(model.network, scene, grid, contract=model.contract)   # reading and blending stay here

The client reads the model's band contract from its Triton config (`eoscale.serve.landcover`), so scenes are
checked and windows cut exactly as for a local checkpoint; `RemoteNetwork.submit` sends a batch of raw windows
and their validity and returns a future of the float32 probabilities, and the window loop keeps `in_flight`
requests on their way (`eoscale.infer.predict._served`), which the server's dynamic batcher gathers into larger
forward passes. HTTP goes through tritonclient's gevent pool (its futures are waited on in the calling thread),
gRPC through its callback API.
"""

from __future__ import annotations

import json
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from eoscale.errors import InputError, InputNotFoundError

DEFAULT_MODEL = "landcover"
IN_FLIGHT = 4  # requests on their way at once: enough to keep a server's batcher fed from one client
OUTPUT = "probabilities_fp32"  # float16's step (2.4e-4 near 1) would move the map's probabilities by more than 1e-4
OUTPUTS = {"classes": OUTPUT, "values": "values", "change": OUTPUT}  # what the window loop asks for, per target kind
TIMEOUT_S = 600.0


def served_model_name(model: str | None, adapter: str | None) -> str:
    return model or (f"{DEFAULT_MODEL}-{adapter}" if adapter else DEFAULT_MODEL)


def _split_url(url: str) -> tuple[str, str]:
    """(protocol, host:port) of http://HOST:PORT, https://…, grpc://HOST:PORT or a bare HOST:PORT (HTTP)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "http", url
    scheme = scheme.lower()
    if scheme not in ("http", "https", "grpc") or not rest.strip("/"):
        raise InputError(f"--server {url!r}: give http://HOST:PORT or grpc://HOST:PORT (e.g. http://127.0.0.1:8000)")
    return scheme, rest.strip("/")


class _Answer:
    """The float32 probabilities of one request, when they come (HTTP: a tritonclient async request)."""

    def __init__(self, request: Any, url: str, output: str = OUTPUT) -> None:
        self._request, self._url, self._output = request, url, output

    def result(self) -> np.ndarray:
        from tritonclient.utils import InferenceServerException

        try:
            return self._request.get_result(timeout=TIMEOUT_S).as_numpy(self._output)
        except InferenceServerException as err:
            raise InputError(f"the server at {self._url} refused a request: {err.message()}") from None


class RemoteNetwork:
    """A served model as the window loop's network: raw windows in, class probabilities (or a regression model's
    values: `output` "values") out (`raw_windows`)."""

    raw_windows = True
    takes_dates = False  # a served temporal model: it takes its stack's `dates` (set by `connect_model`)
    # a served model of several sensors takes `missing_sensor` (set by `connect_model`): predict sends 1, having applied
    # its own --missing-sensor to whole scenes, so a window outside a sensor's swath is a gap, not a missing sensor
    checked_sensors = False

    def __init__(self, url: str, model: str, *, in_flight: int = IN_FLIGHT, output: str = OUTPUT) -> None:
        self.url, self.model, self.in_flight, self.output = url, model, max(1, in_flight), output
        self.protocol, address = _split_url(url)
        if self.protocol == "grpc":
            import tritonclient.grpc as client
        else:
            import tritonclient.http as client
        self._lib = client
        kwargs = {"ssl": self.protocol == "https", "concurrency": self.in_flight} if self.protocol != "grpc" else {}
        self._client = client.InferenceServerClient(url=address, **kwargs)

    def config(self) -> dict:
        """The model's Triton config (a dict, also over gRPC); one line naming the fix if there is none."""
        from tritonclient.utils import InferenceServerException

        try:
            if not self._client.is_server_ready():
                raise InputError(f"the Triton server at {self.url} is not ready yet: wait for 'eoscale serve' to say "
                                 "it is serving")
        except (InferenceServerException, OSError) as err:
            raise InputError(f"no Triton server answers at {self.url} ({str(err).splitlines()[0][:120]}): start one "
                             "with 'eoscale serve --checkpoint CKPT'") from None
        try:
            config = self._client.get_model_config(self.model, **({"as_json": True} if self.protocol == "grpc" else {}))
        except InferenceServerException:
            raise InputNotFoundError(f"the server at {self.url} serves no model {self.model!r} (it serves: "
                                     f"{', '.join(self.served()) or 'see the output of eoscale serve'}): give --model NAME") from None
        return config.get("config", config)

    def served(self) -> list[str]:
        """The models `eoscale serve` serves here, as its default model's config lists them (Triton's repository
        index is one of the endpoints PyTriton keeps behind an access token); empty if that is not known."""
        from tritonclient.utils import InferenceServerException

        try:
            config = self._client.get_model_config(DEFAULT_MODEL, **({"as_json": True} if self.protocol == "grpc" else {}))
        except InferenceServerException:
            return []
        listed = config.get("config", config).get("parameters", {}).get("eoscale_served", {}).get("string_value", "")
        return [name for name in listed.split(",") if name]

    def submit(self, windows: np.ndarray, valid: np.ndarray, dates: np.ndarray | None = None) -> Any:
        """Send raw windows `(n, bands, T, T)` (float32 holding uint16 values), validity `(n, T, T)` and, for a temporal
        model, each window's dates `(n, N)` (days since 1970-01-01); an object whose `result()` is the float32
        probabilities `(n, classes, T, T)` (values: `(n, 1, T, T)`)."""
        lib = self._lib
        pixels = lib.InferInput("windows", list(windows.shape), "UINT16")
        mask = lib.InferInput("valid", list(valid.shape), "UINT8")
        inputs = [pixels, mask]
        if dates is not None:
            days = lib.InferInput("dates", list(dates.shape), "INT32")
            inputs.append(days)
        if self.checked_sensors:
            checked = lib.InferInput("missing_sensor", [len(windows), 1], "UINT8")
            inputs.append(checked)
        outputs = [lib.InferRequestedOutput(self.output)]
        if self.protocol == "grpc":
            pixels.set_data_from_numpy(windows.astype(np.uint16))
            mask.set_data_from_numpy(valid.astype(np.uint8))
            if dates is not None:
                days.set_data_from_numpy(dates.astype(np.int32))
            if self.checked_sensors:
                checked.set_data_from_numpy(np.ones((len(windows), 1), np.uint8))
            future: Future = Future()

            def done(result, error) -> None:
                if error is not None:
                    future.set_exception(InputError(f"the server at {self.url} refused a request: {error.message()}"))
                else:
                    future.set_result(result.as_numpy(self.output))

            self._client.async_infer(self.model, inputs, done, outputs=outputs, client_timeout=TIMEOUT_S)
            return future
        pixels.set_data_from_numpy(windows.astype(np.uint16), binary_data=True)
        mask.set_data_from_numpy(valid.astype(np.uint8), binary_data=True)
        if dates is not None:
            days.set_data_from_numpy(dates.astype(np.int32), binary_data=True)
        if self.checked_sensors:
            checked.set_data_from_numpy(np.ones((len(windows), 1), np.uint8), binary_data=True)
        outputs = [lib.InferRequestedOutput(self.output, binary_data=True)]
        return _Answer(self._client.async_infer(self.model, inputs, outputs=outputs), self.url, self.output)

    def __call__(self, windows: np.ndarray, valid: np.ndarray) -> np.ndarray:
        return self.submit(windows, valid).result()

    def close(self) -> None:
        self._client.close()


@dataclass
class ServedModel:
    """What the server says of its model: the band contract and where the model comes from (`eoscale_model`)."""

    contract: dict
    about: dict


def describe(network: RemoteNetwork) -> ServedModel:
    """The served model's band contract and origin, from its config's parameters (`eoscale.serve.landcover`)."""
    parameters = network.config().get("parameters", {})
    try:
        contract = json.loads(parameters["eoscale_contract"]["string_value"])
        about = json.loads(parameters["eoscale_model"]["string_value"])
    except (KeyError, TypeError, ValueError):
        raise InputError(f"model {network.model!r} at {network.url} carries no eoscale band contract: serve it with "
                         "'eoscale serve'") from None
    return ServedModel(contract, about)


def connect_model(url: str, model: str):
    """A `PredictionModel` whose network is the model `model` served at `url`."""
    from eoscale.classes import ClassTable
    from eoscale.contract import BandContract
    from eoscale.infer.model import PredictionModel

    network = RemoteNetwork(url, model)
    served = describe(network)
    contract = BandContract.from_dict(served.contract)
    if contract.target not in OUTPUTS:
        raise InputError(f"model {model!r} at {url} maps {contract.target!r}: eoscale predict --server maps "
                         f"{', '.join(OUTPUTS)} models")
    network.output = OUTPUTS[contract.target]
    inputs = [t.get("name") for t in network.config().get("input", [])]
    network.takes_dates = "dates" in inputs
    network.checked_sensors = "missing_sensor" in inputs
    checkpoint = served.about.get("checkpoint") or {}
    classes = ClassTable.from_records(list(contract.classes)) if contract.classes else None  # None: a values model
    return PredictionModel(network, contract, classes,
                           checkpoint.get("path", ""), served.about.get("backbone", "served"),
                           served.about.get("adapter"), None, served.about.get("lineage"), server=served.about)
