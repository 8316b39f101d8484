"""Apply a model config's shape, batch_size and layout to a read (not yet compiled) model.

`shape` wins over `batch_size`. "auto" keeps the model's own shape (or batch) until a request
needs another: then the version is reloaded with that `Fit` (core.runtime.auto_shape). A layout
"NHWC:NCHW" means <request layout>:<model layout> and adds a transpose inside the compiled model.
"""

from __future__ import annotations

import openvino as ov

from core.config import ModelConfig
from core.errors import PreconditionError, ServingError
from core.runtime.aliases import Aliases
from core.runtime.auto_shape import Fit
from core.tensors.shapes import ANY, AUTO, Dim, Dims

Layouts = dict[str, tuple[str | None, str]]  # model input name -> (request layout, model layout)


def apply(model: ov.Model, config: ModelConfig, aliases: Aliases, fit: Fit | None = None) -> None:
    names = [_name(port) for port in model.inputs]
    real = {alias: name for name, alias in aliases.inputs.items()}
    layouts = _layouts(config.layout, names, real)
    for port in model.inputs:
        layout = layouts.get(_name(port))
        if layout is not None:
            port.get_node().set_layout(ov.Layout(layout[1]))
    shapes = _shapes(config, model, real, layouts, fit or Fit())
    if shapes:
        try:
            model.reshape(shapes)
        except RuntimeError as exc:
            raise PreconditionError(
                f"Model could not be reshaped with requested shape: {exc}"
            ) from None
    transposed = {n: lay for n, lay in layouts.items() if lay[0] and lay[0] != lay[1]}
    if transposed:
        _add_transposes(model, transposed)
    if config.mean is not None or config.scale is not None or config.precision is not None:
        _add_preprocessing(model, config)


def _name(port: ov.Output) -> str:
    return str(port.get_any_name()) if port.get_names() else port.get_node().get_friendly_name()


def _resolve(name: str, names: list[str] | set[str], real: dict[str, str]) -> str:
    resolved = real.get(name, name)
    if resolved not in names:
        raise ServingError(f"Config names an input that the model does not have: {name}")
    return resolved


def _layouts(value: str | dict[str, str] | None, names: list[str], real: dict[str, str]) -> Layouts:
    if value is None:
        return {}
    items = value.items() if isinstance(value, dict) else ((n, value) for n in names)
    parsed: Layouts = {}
    for name, text in items:
        request, sep, model = text.partition(":")
        parsed[_resolve(name, names, real)] = (request, model) if sep else (None, request)
    return parsed


def _fitted(fit: Fit, names: list[str], real: dict[str, str]) -> dict[str, ov.PartialShape]:
    """A fit's shapes by model input name."""
    return {_resolve(name, names, real): ov.PartialShape(list(dims)) for name, dims in fit.shapes}


def _shapes(
    config: ModelConfig, model: ov.Model, real: dict[str, str], layouts: Layouts, fit: Fit
) -> dict[str, ov.PartialShape]:
    """New shapes by model input name; an "auto" input keeps its own shape until fitted."""
    names = [_name(port) for port in model.inputs]
    fitted = _fitted(fit, names, real)
    shapes: dict[str, ov.PartialShape] = {}
    spec = config.shape
    if isinstance(spec, dict):
        for name, dims in spec.items():
            resolved = _resolve(name, names, real)
            if dims != AUTO:
                shapes[resolved] = _partial(dims)
            elif resolved in fitted:
                shapes[resolved] = fitted[resolved]
    elif spec == AUTO:
        shapes = {name: fitted[name] for name in names if name in fitted}
    elif spec is not None:
        if len(names) != 1:
            raise ServingError(
                "A shape without input names is allowed only for a model with "
                "one input (ANONYMOUS_FIXED_SHAPE_NOT_ALLOWED)"
            )
        shapes = {name: _partial(spec) for name in names}
    batch = config.batch_size
    if batch is not None and not (batch == AUTO and fit.batch is None):
        dim = (fit.batch, fit.batch) if batch == AUTO and fit.batch else batch
        assert not isinstance(dim, str)
        for port in model.inputs:
            name = _name(port)
            if (
                name not in shapes
                and name not in _auto_kept(spec, name, real)
                and port.get_partial_shape().rank.is_static
            ):
                shapes[name] = _with_batch(port, dim, layouts.get(name))
    return shapes


def _auto_kept(spec: object, name: str, real: dict[str, str]) -> set[str]:
    """Inputs that a config shape names (even "auto"): batch_size leaves them alone."""
    if spec is None:
        return set()
    if not isinstance(spec, dict):
        return {name}
    return {real.get(str(n), str(n)) for n in spec}


def _partial(dims: str | Dims) -> ov.PartialShape:
    assert not isinstance(dims, str)
    return ov.PartialShape([_dimension(d) for d in dims])


def _dimension(dim: Dim) -> ov.Dimension:
    if dim == ANY:
        return ov.Dimension()
    return ov.Dimension(dim[0]) if dim[0] == dim[1] else ov.Dimension(dim[0], dim[1])


def _with_batch(
    port: ov.Output, batch: Dim, layout: tuple[str | None, str] | None
) -> ov.PartialShape:
    shape = list(port.get_partial_shape())
    if not shape:
        return ov.PartialShape(shape)
    index = layout[1].index("N") if layout and "N" in layout[1] else 0
    shape[index] = _dimension(batch)
    return ov.PartialShape(shape)


def _add_preprocessing(model: ov.Model, config: ModelConfig) -> None:
    """On the model's only input, as OVMS applies them: requests in `precision`'s first type,
    converted to its second, then (x - mean) / scale, all inside the compiled model."""
    from openvino.preprocess import PrePostProcessor

    if len(model.inputs) != 1:
        raise ServingError(
            "precision, mean and scale apply to a model with one input; this "
            f"one has {len(model.inputs)}"
        )
    ppp = PrePostProcessor(model)
    steps = ppp.input().preprocess()
    mean, scale = config.mean, config.scale
    try:
        if config.precision is not None:
            ppp.input().tensor().set_element_type(getattr(ov.Type, config.precision[0]))
            steps.convert_element_type(getattr(ov.Type, config.precision[1]))
        if mean is not None:
            steps.mean(list(mean) if isinstance(mean, tuple) else mean)
        if scale is not None:
            steps.scale(list(scale) if isinstance(scale, tuple) else scale)
        ppp.build()
    except RuntimeError as exc:
        raise ServingError(
            f"precision / mean / scale cannot apply to this model: {_first_line(exc)}"
        ) from None


def _first_line(exc: Exception) -> str:
    lines = [
        line
        for line in str(exc).splitlines()
        if line.strip() and not line.startswith(("Exception from", "Check '"))
    ]
    return lines[0].strip() if lines else type(exc).__name__


def _add_transposes(model: ov.Model, layouts: Layouts) -> None:
    from openvino.preprocess import PrePostProcessor

    ppp = PrePostProcessor(model)
    for name, (request, model_layout) in layouts.items():
        assert request is not None
        ppp.input(name).tensor().set_layout(ov.Layout(request))
        ppp.input(name).model().set_layout(ov.Layout(model_layout))
    ppp.build()
