"""Medical volumes from Python: NIfTI files and DICOM series read with their
geometry, label maps written back in it, and a volume run through a model
with sliding windows (segrt_volume_* and segrt_volume_save in segrt.h)."""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from . import _segrt
from ._engine import _NP_OF_CODE

PathLike = Union[str, "os.PathLike[str]"]


@dataclass
class Geometry:
    """Where a volume lies in the patient, in segrt's one convention: LPS
    world coordinates in mm (as DICOM and ITK; NIfTI's RAS is converted).
    The array is [depth, height, width] = index axes (k, j, i); voxel
    (k, j, i) lies at ``origin + direction @ (i*spacing[2], j*spacing[1],
    k*spacing[0])``: column c of `direction` is the unit vector of index
    axis c in the order i, j, k (SimpleITK's GetDirection), `spacing` is in
    the array's order. `known` is False where the file says nothing of
    position (then origin 0 and the identity). `qform_code`/`sform_code`
    are a NIfTI input's own, copied when written back."""
    spacing: Tuple[float, float, float] = (1.0, 1.0, 1.0)
    origin: Tuple[float, float, float] = (0.0, 0.0, 0.0)
    direction: np.ndarray = field(default_factory=lambda: np.eye(3))
    known: bool = False
    qform_code: int = 0
    sform_code: int = 0

    def affine_lps(self) -> np.ndarray:
        """4 x 4: (i, j, k, 1) to LPS mm."""
        a = np.eye(4)
        a[:3, :3] = np.asarray(self.direction) * np.array(self.spacing[::-1])
        a[:3, 3] = self.origin
        return a

    def affine_ras(self) -> np.ndarray:
        """4 x 4: (i, j, k, 1) to RAS mm, nibabel's affine for the array
        transposed to (i, j, k)."""
        return np.diag([-1.0, -1.0, 1.0, 1.0]) @ self.affine_lps()

    def _tuple(self) -> tuple:
        d = np.asarray(self.direction, dtype=np.float64)
        if d.shape != (3, 3):
            raise ValueError(f"geometry.direction: want a 3 x 3 matrix, not shape {d.shape}")
        return (bool(self.known), tuple(map(float, self.spacing)), tuple(map(float, self.origin)),
                tuple(tuple(map(float, r)) for r in d), int(self.qform_code), int(self.sform_code))


def _geometry(d: Dict[str, Any]) -> Geometry:
    return Geometry(tuple(d["spacing"]), tuple(d["origin"]), np.array(d["direction"], dtype=np.float64),
                    bool(d["known"]), d["qform_code"], d["sform_code"])


def read_volume(path: PathLike, series: Optional[str] = None, allow_uneven: bool = False
                ) -> Tuple[np.ndarray, Geometry]:
    """Reads a NIfTI file (.nii, .nii.gz), a DICOM file or a folder holding
    a DICOM series (searched recursively; slices ordered by position along
    the slice normal), or any image segrt reads. Returns the voxels as
    [depth, height, width] ([channels, depth, height, width] for several
    channels) in the dtype the reader gives (NIfTI's scl_slope/inter and
    DICOM's rescale applied: int16 HU for a typical CT) and its
    :class:`Geometry`. `series`: the SeriesInstanceUID where a folder holds
    several (otherwise an error lists them; :func:`dicom_series` too).
    `allow_uneven`: a DICOM series with missing slices or uneven spacing is
    resampled to even spacing along the slice normal (the median step,
    linear interpolation by position, float32) with a warning, instead of
    refused."""
    p = os.fspath(path)
    info = _segrt.volume_info(p, series, allow_uneven)
    if info.get("notice"):
        warnings.warn(info["notice"], stacklevel=2)
    c, dims = info["channels"], tuple(info["dims"])
    out = np.empty((c,) + dims, _NP_OF_CODE[info["dtype"]])
    _segrt.volume_read(p, series, out, allow_uneven)
    return (out[0] if c == 1 else out), _geometry(info["geometry"])


def save_volume(path: PathLike, array: Any, geometry: Optional[Geometry] = None) -> None:
    """Writes a label map or image as NIfTI (.nii, or .nii.gz), whole or not
    at all: `array` [depth, height, width] (leading dims of 1 allowed, as a
    window job's 1 x 1 x D x H x W), placed by `geometry` (its affine as
    sform and qform; a NIfTI input's codes copied, else 1, scanner)."""
    a = np.ascontiguousarray(array)
    if a.dtype == np.bool_:
        a = a.astype(np.uint8)
    _segrt.volume_save(os.fspath(path), a, None if geometry is None else geometry._tuple())


def save_dicom_seg(path: PathLike, labels: Any, series_path: PathLike, names: Optional[List[str]] = None,
                   series: Optional[str] = None, allow_uneven: bool = False) -> None:
    """Writes a label map over the DICOM series at `series_path` as a DICOM
    SEG (.dcm), whole or not at all (segrt_dicom_seg_save): one segment per
    label value > 0 that occurs, named ``names[value]`` (``names[0]`` is the
    background's) or "Segment VALUE", a frame per segment and source slice
    referencing that slice. `labels`: integers, [depth, height, width] of
    the series as :func:`read_volume` gives it (with the same `series` and
    `allow_uneven`)."""
    a = np.ascontiguousarray(labels)
    if a.dtype == np.bool_:
        a = a.astype(np.uint8)
    _segrt.dicom_seg_save(os.fspath(path), a, os.fspath(series_path), series, bool(allow_uneven),
                          [str(n) for n in (names or [])])


def dicom_series(path: PathLike) -> List[Dict[str, Any]]:
    """The DICOM series in a folder (or file): uid, modality, description,
    slices, rows, columns, in order of first appearance."""
    return _segrt.dicom_series(os.fspath(path))


_INTENSITY_KINDS = ("none", "ct", "zscore", "range", "rescale01")
_INTERPS = ("nearest", "linear", "cubic")
_CROPS = ("none", "nonzero", "threshold")


def _num(v: float) -> str:
    return repr(float(v))


def preprocess_from_nnunet(model_dir: PathLike, config: str) -> Tuple[Dict[str, str], Dict[str, Any]]:
    """The preprocessing and window options of an nnU-Net v2 model folder
    (its plans.json and dataset.json) for configuration `config` (e.g.
    ``"3d_fullres"``), as nnU-Net's predictor runs it. Returns
    ``(preprocess, window)``: `preprocess` is a dict of settings (the
    segrt.preprocess.* keys of docs/preprocess.md, as text) for
    ``run_volume(..., preprocess=...)``; `window` the keyword arguments of
    the window (roi, overlap, blend, sigma_scale, grid, tta), which the
    caller may change. Errors name the file and the key."""
    p, w = _segrt.preprocess_from_nnunet(os.fspath(model_dir), str(config))
    chans = []
    for kind, lo, hi, mean, std, masked, a_min, a_max, b_min, b_max, clip in p["intensity"]:
        name = _INTENSITY_KINDS[kind]
        if name == "ct":
            name = "ct:" + ",".join(map(_num, (lo, hi, mean, std)))
        elif name == "zscore" and masked:
            name = "zscore:masked"
        elif name == "range":
            name = "range:" + ",".join(map(_num, (a_min, a_max, b_min, b_max))) + (",clip" if clip else "")
        chans.append(name)
    settings = {
        "transpose": ",".join(map(str, p["transpose"])),
        "orientation": p["orientation"] or "none",
        "crop": _CROPS[p["crop"]],
        "intensity": ";".join(chans) or "none",
        "intensity_first": str(p["intensity_first"]),
        "spacing": ",".join(map(_num, p["spacing"])) if any(p["spacing"]) else "none",
        "grid": "nnunet" if p["grid"] == 0 else "monai",
        "image_interp": _INTERPS[p["image_interp"]],
        "image_interp_z": _INTERPS[p["image_interp_z"]],
        "result_interp": _INTERPS[p["result_interp"]],
        "result_interp_z": _INTERPS[p["result_interp_z"]],
        "result_probs": str(p["result_probs"]),
        "anisotropy": _num(p["anisotropy"]),
    }
    window = {"roi": tuple(w["roi"]), "overlap": w["overlap"][0], "blend": ("constant", "gaussian", "gaussian_nnunet")[w["blend"]],
              "sigma_scale": w["sigma_scale"], "grid": "nnunet" if w["grid"] else "monai",
              "tta": "mirror" if w["mirror_axes"] else None}
    return settings, window


def _setting_text(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int, float, np.integer, np.floating)):
        return _num(value)
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)) and key == "intensity":
        return ";".join(_setting_text(key, v) for v in value)
    if isinstance(value, (list, tuple, np.ndarray)):
        return ",".join(_setting_text(key, v) for v in value)
    raise TypeError(f"preprocess[{key!r}]: want text, a number or a list of numbers, not {value!r}")


def _run_preprocessed(engines: List[Any], path: str, roi: Any, output: str, out: Optional[PathLike],
                      series: Optional[str], preprocess: Any, window: Dict[str, Any]) -> Tuple[Any, Geometry]:
    """run_volume's job with preprocessing: segrt_window_job_run over the
    models' files (built as the first engine was), the labels written as
    NIfTI in the volume's grid and read back."""
    import tempfile
    from ._engine import _PRECISIONS, parse_device
    from ._window import _ACCUMULATORS, _ACTIVATIONS, _BLENDS, _GRIDS, _OUTPUTS, _PADS, _bytes, _mirror_axes
    if isinstance(preprocess, str) and preprocess in ("model", "none"):
        base, settings = preprocess, {}
    elif isinstance(preprocess, dict):
        base, settings = "model", preprocess
    else:
        raise TypeError(f"preprocess: want a dict of settings, 'model' or 'none', not {preprocess!r}")
    items = tuple((str(k), _setting_text(str(k), v)) for k, v in settings.items())
    if any(e._source is None for e in engines):
        raise ValueError("preprocess: the job builds its engines from the models' ONNX files; give engines of "
                         "ONNX models, not plan files")
    src, device, precision, cache_dir, threads = engines[0]._source
    kind, index = parse_device("cpu" if device is None else device)
    unknown = set(window) - {"overlap", "sw_batch", "blend", "tta", "max_memory", "sigma_scale", "padding",
                             "pad_value", "grid", "activation", "threshold", "max_host_memory", "progress",
                             "accumulator"}
    if unknown:
        raise TypeError(f"run_volume: unexpected arguments {', '.join(sorted(unknown))}")
    rois = (roi,) * 3 if isinstance(roi, (int, np.integer)) else tuple(roi)
    ov = window.get("overlap", 0.25)
    overlaps = (ov,) * 3 if isinstance(ov, (int, float)) else tuple(ov)
    batch = window.get("sw_batch", 1)
    if len(rois) != 3 or len(overlaps) != 3:
        raise ValueError(f"roi and overlap: a volume has 3 spatial dims, not {roi!r} and {ov!r}")
    if batch == "auto":
        batch = 1
    accumulator = window.get("accumulator", "fp32")
    if accumulator not in _ACCUMULATORS:
        raise ValueError(f"accumulator: want one of {', '.join(_ACCUMULATORS)}, not {accumulator!r}")
    cfg = (tuple(int(r) for r in rois), tuple(float(o) for o in overlaps), int(batch),
           _BLENDS[window.get("blend", "gaussian")], float(window.get("sigma_scale", 0.125)),
           _PADS[window.get("padding", "constant")], float(window.get("pad_value", 0.0)),
           _GRIDS[window.get("grid", "monai")], _OUTPUTS[output], _ACTIVATIONS[window.get("activation")],
           float(window.get("threshold", 0.5)), _mirror_axes(window.get("tta"), 3),
           _bytes(window.get("max_memory"), "max_memory"), _bytes(window.get("max_host_memory"), "max_host_memory"),
           _ACCUMULATORS[accumulator])
    paths = tuple(e._source[0] for e in engines)
    build = (kind, index, _PRECISIONS[precision], int(threads or 0))
    with tempfile.TemporaryDirectory(prefix="segrt-") as tmp:
        target = os.fspath(out) if out is not None else os.path.join(tmp, "labels.nii.gz")
        if not target.lower().endswith((".nii", ".nii.gz")):
            raise ValueError(f"out: the labels of a preprocessed volume are written as NIfTI (.nii, .nii.gz), "
                             f"not {target}")
        _segrt.volume_job(paths, build, path, series, target, cfg, base, items)
        labels, geo = read_volume(target)
    return labels[None, None], geo


def run_volume(engine_or_engines: Any, path: PathLike, roi: Any, output: str = "labels",
               out: Optional[PathLike] = None, series: Optional[str] = None, allow_uneven: bool = False,
               names: Optional[List[str]] = None, preprocess: Any = None, **window: Any) -> Tuple[Any, Geometry]:
    """A volume through a 3-D model with sliding windows. Returns (result,
    geometry).

    Without `preprocess` it runs on the volume's own voxel grid: reads
    `path` (as :func:`read_volume`), runs ``sliding_window(engine, volume
    as float32 1 x C x D x H x W, roi, output=output, **window)``, and with
    `out` writes the result as NIfTI in the volume's geometry (labels, or
    one volume per class), or for a DICOM series and an `out` ending in
    .dcm, the labels as a DICOM SEG (:func:`save_dicom_seg`, segments named
    by `names`). The intensities go in as the file gives them (HU for a
    CT).

    With `preprocess` the volume is preprocessed as `segrt run` does it
    (docs/preprocess.md) and the labels come back in its own grid:
    ``"model"`` as the model's segrt.preprocess.* metadata declares, a
    dict of settings over it (``{"orientation": "RAS", "spacing": (2, 2,
    2), "intensity": "ct:-1000,1000,40,10"}``: the metadata keys without
    their prefix; numbers and lists are written as text), or ``"none"``.
    :func:`preprocess_from_nnunet` gives an nnU-Net folder's settings and
    window. The engines must be of ONNX models (the job builds its own
    engines from their files, as the first engine was built); `output`
    must be ``"labels"``; the result is uint8 1 x 1 x D x H x W, written
    to `out` (a .nii/.nii.gz) when given."""
    if preprocess is not None:
        from ._engine import engines_of
        if output != "labels":
            raise ValueError("output: a preprocessed volume's result comes back to its grid as labels")
        if allow_uneven or names is not None:
            raise ValueError("allow_uneven and names: not with preprocess (segrt run's volume job takes them)")
        return _run_preprocessed(engines_of(engine_or_engines), os.fspath(path), roi, output, out, series,
                                 preprocess, window)
    from ._window import sliding_window
    vol, geo = read_volume(path, series, allow_uneven)
    x = np.ascontiguousarray(vol, dtype=np.float32)
    x = x[None, None] if x.ndim == 3 else x[None]
    result = sliding_window(engine_or_engines, x, roi, output=output, **window)
    if out is not None:
        r = result if isinstance(result, np.ndarray) else np.asarray(result)
        if r.shape[1] == 1 and os.fspath(out).lower().endswith(".dcm"):
            save_dicom_seg(out, r[0, 0], path, names, series, allow_uneven)
        elif r.shape[1] == 1:
            save_volume(out, r[0, 0], geo)
        else:
            raise ValueError("out: a NIfTI of one volume takes labels; write probabilities with save_volume per "
                             "class or as .npy")
    return result, geo


def run_cases(model: Union[PathLike, List[PathLike]], in_dir: PathLike, out_dir: PathLike,
              roi: Union[int, Tuple[int, ...]], overlap: Union[float, Tuple[float, ...]] = 0.25,
              sw_batch: Union[int, str] = "auto", blend: str = "gaussian", output: str = "labels", tta: Any = None,
              device: Union[str, int] = "cpu", precision: str = "fp32", threads: Optional[int] = None,
              skip_existing: bool = False, prefetch: bool = True, extension: str = ".nii.gz",
              series: Optional[str] = None, max_memory: Union[int, str, None] = None,
              max_host_memory: Union[int, str, None] = None, *, sigma_scale: float = 0.125,
              padding: str = "constant", pad_value: float = 0.0, grid: str = "monai",
              activation: Optional[str] = None, threshold: float = 0.5, accumulator: str = "fp32") -> Dict[str, Any]:
    """Every case of the folder `in_dir` through the model (an .onnx path,
    or a list of them: an ensemble) with sliding windows, each result
    written to ``out_dir/CASE.nii.gz`` in the case's own grid, as
    ``segrt run MODEL -i IN_DIR -o OUT_DIR`` does (segrt_cases_run): NIfTI
    files (nnU-Net's ``CASE_0000.nii.gz``, ``CASE_0001.nii.gz``... stacked
    as channels) and subfolders holding a DICOM series are the cases; the
    engines are built once; the next case is read while one runs (unless
    not `prefetch`); `skip_existing` skips cases whose result exists;
    ``out_dir/summary.json`` records each case. The window options are
    :func:`sliding_window`'s. `out_dir` is created if absent.

    Returns the report: ``cases``, ``done``, ``skipped``, ``failed``,
    ``failed_names``, ``seconds`` and ``message`` (naming the failed cases;
    "" when none failed). A failing case does not raise: the others run and
    the report names it. Errors that stop the job (options, folders, a
    model that does not load or build) raise."""
    paths = [os.fspath(p) for p in (model if isinstance(model, (list, tuple)) else [model])]
    cfg, auto, (kind, index, prec) = _file_job_cfg(3, roi, overlap, sw_batch, blend, sigma_scale, padding, pad_value,
                                                   grid, output, activation, threshold, tta, max_memory,
                                                   max_host_memory, accumulator, device, precision)
    os.makedirs(out_dir, exist_ok=True)
    return _segrt.cases_run(paths, os.fspath(in_dir), os.fspath(out_dir), cfg, kind, index, prec,
                            int(threads or 0), auto, bool(skip_existing), bool(prefetch), extension, series)


def _file_job_cfg(n_default: int, roi: Any, overlap: Any, sw_batch: Any, blend: str, sigma_scale: float,
                  padding: str, pad_value: float, grid: str, output: str, activation: Optional[str],
                  threshold: float, tta: Any, max_memory: Any, max_host_memory: Any, accumulator: str,
                  device: Union[str, int], precision: str) -> Tuple[Tuple[Any, ...], bool, Tuple[int, int, int]]:
    """A file job's window options as the extension's cfg tuple, whether
    sw_batch is "auto", and (device kind, index, precision), checked."""
    from ._engine import _PRECISIONS, parse_device
    from ._window import _ACCUMULATORS, _ACTIVATIONS, _BLENDS, _GRIDS, _OUTPUTS, _PADS, _bytes, _mirror_axes
    n = len(roi) if isinstance(roi, (list, tuple)) else n_default
    rois = tuple(int(r) for r in roi) if isinstance(roi, (list, tuple)) else (int(roi),) * n
    overlaps = tuple(float(o) for o in overlap) if isinstance(overlap, (list, tuple)) else (float(overlap),) * n
    for name, value, table in (("blend", blend, _BLENDS), ("padding", padding, _PADS), ("grid", grid, _GRIDS),
                               ("output", output, _OUTPUTS), ("activation", activation, _ACTIVATIONS),
                               ("precision", precision, _PRECISIONS), ("accumulator", accumulator, _ACCUMULATORS)):
        if value not in table:
            raise ValueError(f"{name}: want one of {', '.join(str(k) for k in table)}, not {value!r}")
    auto = sw_batch == "auto"
    if not auto and (isinstance(sw_batch, bool) or not isinstance(sw_batch, int) or sw_batch < 1):
        raise ValueError(f"sw_batch: want a number of windows >= 1 or 'auto', not {sw_batch!r}")
    kind, index = parse_device(device)
    cfg = (rois, overlaps, 1 if auto else int(sw_batch), _BLENDS[blend], float(sigma_scale), _PADS[padding],
           float(pad_value), _GRIDS[grid], _OUTPUTS[output], _ACTIVATIONS[activation], float(threshold),
           _mirror_axes(tta, n), _bytes(max_memory, "max_memory"), _bytes(max_host_memory, "max_host_memory"),
           _ACCUMULATORS[accumulator])
    return cfg, auto, (kind, index, _PRECISIONS[precision])


def run_slide(model: Union[PathLike, List[PathLike]], slide: PathLike, out: PathLike,
              roi: Union[int, Tuple[int, int]], overlap: Union[float, Tuple[float, float]] = 0.0,
              mpp: Optional[float] = None, tissue: str = "otsu", sw_batch: Union[int, str] = "auto",
              device: Union[str, int] = "cpu", precision: str = "fp32", threads: Optional[int] = None,
              tissue_mask: Optional[PathLike] = None, thumbnail: Optional[PathLike] = None,
              geojson: Optional[PathLike] = None, max_memory: Union[int, str, None] = None,
              max_host_memory: Union[int, str, None] = None, *, blend: str = "constant",
              sigma_scale: float = 0.125, activation: Optional[str] = None,
              accumulator: str = "fp32", output: str = "labels") -> Dict[str, Any]:
    """A whole-slide image through a 2-D model (an .onnx path, or a list
    of them: an ensemble), as `segrt run MODEL SLIDE -o OUT.tif` does it:
    the slide read at `mpp` microns per pixel (None: the model's segrt.mpp
    metadata, else the slide's full resolution; the nearest finer level,
    shrunk by area where none matches), normalised as the model's
    segrt.input.* metadata says, windows run only where there is tissue
    (`tissue` "otsu") or everywhere ("none"), the labels written to `out`
    as a pyramidal tiled TIFF at that resolution, streamed row by row on a
    GPU so that host memory stays bounded whatever the slide's size.
    `tissue_mask`, `thumbnail` (PNGs) and `geojson` (polygons QuPath
    imports, in level-0 pixels) are written where given. `threads`: the
    slide's reader threads (and a CPU engine's). `output` "probs" writes
    the classes' probabilities instead, a uint8 sample a class (round(255
    p)); the thumbnail and polygons then show the most probable class.

    Returns ``shape`` (the grid the windows ran over, height and width),
    ``windows`` (of the grid), ``runs`` (windows the networks ran: fewer
    where tissue detection skipped some), ``seconds`` (the windows),
    ``read_seconds`` and ``write_seconds``."""
    if tissue not in ("otsu", "none"):
        raise ValueError(f"tissue: want 'otsu' or 'none', not {tissue!r}")
    if output not in ("labels", "probs"):
        raise ValueError(f"output: want 'labels' or 'probs', not {output!r}")
    paths = [os.fspath(p) for p in (model if isinstance(model, (list, tuple)) else [model])]
    cfg, auto, (kind, index, prec) = _file_job_cfg(2, roi, overlap, sw_batch, blend, sigma_scale, "constant", 0.0,
                                                   "monai", output, activation, 0.5, None, max_memory,
                                                   max_host_memory, accumulator, device, precision)
    extra = tuple(None if p is None else os.fspath(p) for p in (tissue_mask, thumbnail, geojson))
    return _segrt.slide_job(paths, (kind, index, prec, int(threads or 0)), os.fspath(slide), os.fspath(out), cfg,
                            (float(mpp or 0.0), 0 if tissue == "otsu" else 1, auto), extra)
