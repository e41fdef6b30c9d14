"""The benchmark's sizes, the network nnU-Net would build, the paths of the
files each step writes, and segrt's command lines: everything the lead may
want to adjust is in this file.

Axis conventions:
  * DICOM slices are Rows x Columns; the synthetic volume is generated as
    numpy (slices, rows, columns) = (z, y, x) in LPS, which is also the
    (z, y, x) order in which nnU-Net (SimpleITK) sees the NIfTI;
  * nnU-Net's spacing and patch lists are in that (z, y, x) order;
  * MONAI's spacing (pixdim) is in RAS (x, y, z) order after Orientation;
  * segrt's --spacing D,H,W is written here in (z, y, x) order as well
    (D = slices); adjust SEGRT_SPACING_ORDER if the CLI settles otherwise.
"""
import dataclasses
import os
import pathlib

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@dataclasses.dataclass(frozen=True)
class Setup:
    name: str
    shape_zyx: tuple        # slices, rows, columns of the synthetic CT
    spacing_zyx: tuple      # mm: slice step, row spacing, column spacing
    target_spacing_zyx: tuple  # mm: the plans' 3d_fullres spacing
    patch_zyx: tuple        # the network's window
    features: tuple         # per stage
    strides: tuple          # per stage, isotropic
    n_conv: int             # convolutions per stage (encoder and decoder)
    classes: int
    sw_batch: int           # windows per network call (MONAI, segrt)
    runs: int               # timed runs per contender (default)
    train_steps: int        # make_model.py's training steps on the case (0: random weights)


FULL = Setup(
    name="full",
    shape_zyx=(400, 512, 512),
    spacing_zyx=(1.5, 0.8, 0.8),
    # The model's training data had 1 x 1 x 1.5 mm voxels (a common CT
    # median spacing), so both pipelines resample in plane: 512 -> 410.
    target_spacing_zyx=(1.5, 1.0, 1.0),
    # 128^3 is chosen, not planned by nnU-Net's ExperimentPlanner; it is the
    # patch nnU-Net's default planner gives CT datasets of about this
    # spacing and the one the 6-stage 32..320 network is usually seen with.
    patch_zyx=(128, 128, 128),
    features=(32, 64, 128, 256, 320, 320),
    strides=(1, 2, 2, 2, 2, 2),
    n_conv=2,
    classes=14,
    sw_batch=2,  # nnU-Net predicts one window at a time; MONAI's tutorials use 4 for 96^3
    runs=5,
    train_steps=600,
)

SMALL = Setup(
    name="small",
    shape_zyx=(64, 96, 96),
    spacing_zyx=(1.5, 0.8, 0.8),
    target_spacing_zyx=(1.5, 1.0, 1.0),
    patch_zyx=(32, 32, 32),
    features=(4, 8, 16, 16),
    strides=(1, 2, 2, 2),
    n_conv=2,
    classes=4,
    sw_batch=2,
    runs=1,  # and no warm-up (run.py): a minute or two on a CPU
    train_steps=600,
)

DATASET_ID = 999
DATASET_NAME = f"Dataset{DATASET_ID:03d}_Bench"
TRAINER_DIR = "nnUNetTrainer__nnUNetPlans__3d_fullres"
CASE = "CASE"
SEED = 0
OVERLAP = 0.5
SIGMA_SCALE = 0.125  # MONAI's and nnU-Net's Gaussian: sigma = window / 8
INSTANCE_NORM_EPS = 1e-5
TRAIN_LR = float(os.environ.get("VBENCH_TRAIN_LR", "5e-3"))  # make_model.py's Adam, cosine to 0
TRAIN_AUGMENT = os.environ.get("VBENCH_TRAIN_AUGMENT", "1") != "0"  # random flips and axis orders
LEAKY_SLOPE = 0.01  # nnU-Net's LeakyReLU(inplace=True): torch's default slope


def setup(small):
    return SMALL if small else FULL


@dataclasses.dataclass(frozen=True)
class Paths:
    work: pathlib.Path

    @property
    def dicom_dir(self):
        return self.work / "case" / "dicom"

    @property
    def nifti_in_dir(self):  # nnU-Net's input folder: CASE_0000.nii.gz
        return self.work / "case" / "nnunet_in"

    @property
    def nifti_case(self):
        return self.nifti_in_dir / f"{CASE}_0000.nii.gz"

    @property
    def structures(self):  # the noise-free structure of each voxel (make_case.STRUCTURES)
        return self.work / "case" / "structures.nii.gz"

    @property
    def case_json(self):  # geometry and intensity statistics of the case
        return self.work / "case" / "case.json"

    @property
    def results_root(self):  # $nnUNet_results
        return self.work / "nnUNet_results"

    @property
    def model_folder(self):
        return self.results_root / DATASET_NAME / TRAINER_DIR

    @property
    def onnx(self):
        return self.work / "model" / "net.onnx"

    @property
    def torch_weights(self):  # state dict + architecture, for the MONAI side
        return self.work / "model" / "net_torch.pt"

    @property
    def model_json(self):
        return self.work / "model" / "model.json"

    def out_dir(self, contender):
        return self.work / "out" / contender

    def label_file(self, contender):
        return self.out_dir(contender) / f"{CASE}.nii.gz"

    def worker_json(self, contender):
        return self.work / "out" / f"{contender}.json"


def default_work_dir(small):
    return pathlib.Path(os.environ.get("VBENCH_WORK", f"/tmp/volume_vs_monai{'-small' if small else ''}"))


# ---------------------------------------------------------------------------
# segrt's command lines, in one place. {placeholders} are filled by
# segrt_command(); a variant whose flags the CLI does not have yet fails in
# the run and is reported as such (the others still run).

SEGRT_SPACING_ORDER = "zyx"  # the order of --spacing's three numbers

SEGRT_COMMON = [
    "{segrt}", "run", "{onnx}", "{input}", "-o", "{out}",
    "--device", "{device}", "--output", "labels", "--quiet",
]

SEGRT_VARIANTS = {
    # MONAI's chain as flags: RAS, the plans' spacing (trilinear), the CT
    # window as ScaleIntensityRange, MONAI's window grid and Gaussian.
    "segrt_monai": [
        "--orientation", "RAS",
        "--spacing", "{spacing}", "--resample-grid", "monai", "--interp", "linear",
        "--intensity", "range:{a_min},{a_max},{b_min},{b_max},clip",
        # Invertd of the logits (bilinear), then argmax: not probabilities.
        "--result-interp", "linear",
        # MONAI's network takes the volume as (x, y, z): the roi in that order too.
        "--axes", "whd",
        "--roi", "{roi_whd}", "--overlap", "{overlap}", "--blend", "gaussian", "--grid", "monai",
        "--sw-batch", "{sw_batch}",
    ],
    # nnU-Net's own configuration read from its results folder: spacing,
    # patch, CTNormalization, third-order resampling, its tile grid and
    # Gaussian; no mirroring (nnU-Net runs with use_mirroring=False here).
    "segrt_nnunet": [
        "--nnunet-plans", "{model_folder}", "3d_fullres", "--tta", "none",
        "--sw-batch", "{sw_batch}",
    ],
    # What the CLI does today without preprocessing flags: the volume on its
    # own grid, raw HU. Not comparable (other grid, no normalisation); it
    # exercises the harness where the flags above do not exist yet.
    "segrt_plain": [
        "--roi", "{roi}", "--overlap", "{overlap}", "--blend", "gaussian",
        "--sw-batch", "{sw_batch}",
    ],
}

# The input each variant reads: "dicom" (the series' folder, as MONAI) or
# "nifti" (nnU-Net's CASE_0000.nii.gz); default dicom.
SEGRT_INPUT = {}

# Which other contender each segrt variant must agree with (>= 99.9 %).
SEGRT_REFERENCE = {"segrt_monai": "monai", "segrt_nnunet": "nnunet", "segrt_plain": "monai"}


def segrt_command(variant, segrt, paths, s, window, device, precision, sw_batch):
    """argv of one segrt variant; `window` is make_model's CT window
    (a_min, a_max, b_min, b_max)."""
    spacing = s.target_spacing_zyx if SEGRT_SPACING_ORDER == "zyx" else s.target_spacing_zyx[::-1]
    fill = {
        "segrt": str(segrt), "onnx": str(paths.onnx), "input": str(SEGRT_INPUT.get(variant, "dicom")),
        "out": str(paths.label_file(variant)), "device": device, "model_folder": str(paths.model_folder),
        "spacing": ",".join(f"{v:g}" for v in spacing), "roi": ",".join(map(str, s.patch_zyx)),
        "roi_whd": ",".join(map(str, s.patch_zyx[::-1])),
        "overlap": f"{OVERLAP:g}", "sw_batch": str(sw_batch),
        "a_min": f"{window[0]:.6g}", "a_max": f"{window[1]:.6g}", "b_min": f"{window[2]:.9g}",
        "b_max": f"{window[3]:.9g}",
    }
    fill["input"] = str(paths.nifti_case if fill["input"] == "nifti" else paths.dicom_dir)
    argv = [a.format(**fill) for a in SEGRT_COMMON + SEGRT_VARIANTS[variant]]
    if device.startswith("cuda") and precision:
        argv += ["--precision", precision]
    return argv
