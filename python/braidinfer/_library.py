"""Finding and loading libbraid.so, the ctypes mirror of braid.h, and BraidError."""

import ctypes
import enum
import glob
import os
import threading

# ---- braid.h, field for field ----


class Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class TensorDesc(ctypes.Structure):
    """braid_tensor (= DLPack's DLTensor)."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", Device),
        ("ndim", ctypes.c_int32),
        ("dtype", DType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class RopeConfigDesc(ctypes.Structure):
    """braid_rope_config."""

    _fields_ = [
        ("theta", ctypes.c_float),
        ("rotary_dim", ctypes.c_int32),
        ("scaling", ctypes.c_int32),
        ("factor", ctypes.c_float),
        ("low_freq_factor", ctypes.c_float),
        ("high_freq_factor", ctypes.c_float),
        ("original_max_position", ctypes.c_int32),
        ("beta_fast", ctypes.c_float),
        ("beta_slow", ctypes.c_float),
        ("mscale", ctypes.c_float),
        ("mscale_all_dim", ctypes.c_float),
        ("attention_factor", ctypes.c_float),
        ("truncate", ctypes.c_int32),
        ("interleaved", ctypes.c_int32),
    ]


DEVICE_CPU = 1
DEVICE_CUDA = 2
MAX_DIMS = 6


class Status(enum.IntEnum):
    """braid_status (numbered like braid::ErrorKind)."""

    OK = 0
    INVALID_ARGUMENT = 1
    SHAPE = 2
    DTYPE = 3
    DEVICE = 4
    CUDA = 5
    CUBLAS = 6
    OUT_OF_MEMORY = 7
    UNSUPPORTED = 8
    IO = 9
    INTERNAL = 10


class BraidError(RuntimeError):
    """A failed braid call: `status` (a Status) and the library's full `message`."""

    def __init__(self, status, message):
        try:
            status = Status(status)
        except ValueError:
            status = Status.INTERNAL
        self.status = status
        self.message = message
        super().__init__(f"BRAID_ERR_{status.name}: {message}")


_T = ctypes.POINTER(TensorDesc)
_S = ctypes.c_void_p  # cudaStream_t
_PROTOTYPES = {
    "braid_status_string": (ctypes.c_char_p, [ctypes.c_int]),
    "braid_last_error_message": (ctypes.c_char_p, []),
    "braid_version": (ctypes.c_char_p, []),
    "braid_cuda_device_count": (ctypes.c_int, []),
    "braid_rope_config_init": (None, [ctypes.POINTER(RopeConfigDesc)]),
    "braid_embedding": (ctypes.c_int, [_T, _T, _T, _S]),
    "braid_rms_norm": (ctypes.c_int, [_T, _T, ctypes.c_float, _T, _S]),
    "braid_add_rms_norm": (ctypes.c_int, [_T, _T, _T, ctypes.c_float, _T, _S]),
    "braid_rope_apply": (ctypes.c_int, [_T, _T, _T, ctypes.POINTER(RopeConfigDesc), _S]),
    "braid_silu_mul": (ctypes.c_int, [_T, _T, _S]),
    "braid_gemm": (ctypes.c_int, [_T, _T, _T, _T, _S]),
    "braid_softmax": (ctypes.c_int, [_T, _T, _S]),
    "braid_argmax": (ctypes.c_int, [_T, _T, _S]),
    "braid_sample_tokens_workspace_bytes": (ctypes.c_int64, [ctypes.c_int64, ctypes.c_int64]),
    "braid_sample_tokens": (ctypes.c_int, [_T, _T, _T, _T, _T, _T, _T, _T, _T, _S]),
    "braid_attention": (
        ctypes.c_int,
        [_T, _T, _T, _T, _T, _T, ctypes.c_int, ctypes.c_float, _T, _T, _S],
    ),
    "braid_attention_prefill": (
        ctypes.c_int,
        [_T, _T, _T, _T, _T, ctypes.c_int, ctypes.c_int, ctypes.c_float, _T, _T, _S],
    ),
    "braid_attention_decode_workspace_floats": (
        ctypes.c_int64,
        [ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64],
    ),
    "braid_attention_decode": (
        ctypes.c_int,
        [_T, _T, _T, _T, _T, ctypes.c_float, _T, _T, _T, _S],
    ),
    "braid_qk_norm_rope_kv_append": (
        ctypes.c_int,
        [_T, _T, _T, _T, _T, ctypes.c_float, _T, ctypes.POINTER(RopeConfigDesc), _T, _T, _T, _S],
    ),
    "braid_attention_decode_counters": (
        ctypes.c_int64,
        [ctypes.c_int64, ctypes.c_int64, ctypes.c_int64],
    ),
    "braid_qk_norm_rope_kv_append_attention_decode": (
        ctypes.c_int,
        [_T, _T, _T, _T, _T, ctypes.c_float, _T, ctypes.POINTER(RopeConfigDesc), _T, _T, _T, _T,
         _T, ctypes.c_float, _T, _T, _T, _T, _S],
    ),
    "braid_attention_mla_workspace_floats": (
        ctypes.c_int64,
        [ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64],
    ),
    "braid_attention_mla": (
        ctypes.c_int,
        [_T, _T, _T, _T, _T, _T, ctypes.c_int, ctypes.c_float, _T, _T, _T, _S],
    ),
    "braid_kv_append": (ctypes.c_int, [_T, _T, _T, _T, _T, _S]),
    "braid_paged_kv_gather": (ctypes.c_int, [_T, _T, _T, _T, _T, _T, _T, _S]),
    "braid_moe_route_topk_softmax": (ctypes.c_int, [_T, ctypes.c_int, ctypes.c_int, _T, _T, _S]),
    "braid_moe_experts": (ctypes.c_int, [_T, _T, _T, _T, _T, _T, _T, _S]),
    "braid_moe_experts_ex": (ctypes.c_int, [_T] * 14 + [_S]),
    "braid_moe_route_grouped": (
        ctypes.c_int,
        [_T, _T, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_float, _T, _T, _S],
    ),
    "braid_moe_route_softmax_grouped": (
        ctypes.c_int,
        [_T, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_float, _T, _T, _S],
    ),
    "braid_moe_permute_workspace_size": (ctypes.c_int64, [ctypes.c_int64, ctypes.c_int]),
    "braid_moe_permute": (ctypes.c_int, [_T, ctypes.c_int, _T, _T, _T, _T, _S]),
    "braid_moe_gather": (ctypes.c_int, [_T, _T, ctypes.c_int, _T, _S]),
    "braid_moe_combine": (ctypes.c_int, [_T, _T, _T, _T, _S]),
    "braid_moe_grouped_gemm": (ctypes.c_int, [_T, _T, _T, ctypes.c_int, _T, _S]),
    "braid_moe_fp8_quantize": (ctypes.c_int, [_T, _T, _T, _S]),
    "braid_moe_gather_fp8": (ctypes.c_int, [_T, _T, _T, ctypes.c_int, _T, _T, _S]),
    "braid_moe_grouped_gemm_fp8": (
        ctypes.c_int, [_T, _T, _T, _T, _T, ctypes.c_int, _T, _T, _S]),
    "braid_moe_fp8_block_scale_workspace_bytes": (
        ctypes.c_int64,
        [ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int,
         ctypes.c_int, ctypes.c_int, ctypes.c_int],
    ),
    "braid_moe_fp8_block_scale": (
        ctypes.c_int,
        [_T, _T, _T, _T, _T, _T, _T, _T, ctypes.c_int, ctypes.c_float, ctypes.c_int,
         ctypes.c_int, ctypes.c_int, ctypes.c_int, _T, _T, _S],
    ),
    # offline inference (llm.py): JSON in, JSON out; returned strings are freed by the caller
    "braid_llm_create": (
        ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]),
    "braid_llm_destroy": (None, [ctypes.c_void_p]),
    "braid_llm_generate": (
        ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]),
    "braid_llm_tokenize": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]),
    "braid_llm_detokenize": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_int64, ctypes.c_int,
         ctypes.POINTER(ctypes.c_void_p)]),
    "braid_llm_info": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]),
    # c_void_p, not c_char_p: ctypes would copy a c_char_p result and lose the pointer to free
    "braid_free_string": (None, [ctypes.c_void_p]),
}

_lock = threading.Lock()
_lib = None
_lib_path = None


def _candidates():
    """Where libbraid.so is looked for, in order (see find_library)."""
    env = os.environ.get("BRAIDINFER_LIBRARY")
    if env:
        return [os.path.join(env, "libbraid.so") if os.path.isdir(env) else env], True
    here = os.path.dirname(os.path.abspath(__file__))
    found = [os.path.join(here, "lib", "libbraid.so")]
    repo = os.path.dirname(os.path.dirname(here))  # python/braidinfer -> repository root
    builds = glob.glob(os.path.join(repo, "build*", "libbraid.so"))
    found += sorted(builds, key=os.path.getmtime, reverse=True)  # newest first
    return found, False


def find_library():
    """Path of the libbraid.so to load: $BRAIDINFER_LIBRARY (a file or a folder), else the
    package's own lib/ folder, else the newest <repo>/build*/libbraid.so."""
    paths, from_env = _candidates()
    for p in paths:
        if os.path.isfile(p):
            return p
    if from_env:
        raise OSError(f"braidinfer: BRAIDINFER_LIBRARY={os.environ['BRAIDINFER_LIBRARY']} "
                      f"does not name a libbraid.so")
    raise OSError("braidinfer: libbraid.so not found; build it (cmake --build <build> --target "
                  "braid) or set BRAIDINFER_LIBRARY. Looked in: " + ", ".join(paths))


def library():
    """The loaded libbraid.so (a ctypes.CDLL), loaded on first use."""
    global _lib, _lib_path
    with _lock:
        if _lib is None:
            path = find_library()
            lib = ctypes.CDLL(path)
            for name, (restype, argtypes) in _PROTOTYPES.items():
                fn = getattr(lib, name, None)
                if fn is not None:  # an older library may lack newer ops: reported when called
                    fn.restype, fn.argtypes = restype, argtypes
            _lib, _lib_path = lib, path
        return _lib


def library_path():
    library()
    return _lib_path


def function(name):
    """The C function `name`; BraidError(UNSUPPORTED) if this library does not export it."""
    fn = getattr(library(), name, None)
    if fn is None:
        raise BraidError(Status.UNSUPPORTED, f"{library_path()} does not export {name}")
    return fn


def check(status):
    """Raises BraidError with the library's message for a non-OK status."""
    if status != Status.OK:
        raw = function("braid_last_error_message")()
        raise BraidError(status, raw.decode("utf-8", "replace") if raw else "")


def status_string(status):
    return function("braid_status_string")(int(status)).decode()


def version():
    """The library's version string."""
    return function("braid_version")().decode()


def cuda_device_count():
    """CUDA devices visible to the library (0 without a GPU or in a CPU-only build)."""
    return int(function("braid_cuda_device_count")())
