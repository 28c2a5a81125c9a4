"""Zero-copy descriptors (braid_tensor) of torch tensors and numpy arrays, and allocation of
outputs like a given input. torch and numpy are looked up only if already imported by the
caller, so this package imports without either."""

import ctypes
import sys

from ._library import DEVICE_CPU, DEVICE_CUDA, MAX_DIMS, BraidError, Device, DType, Status, TensorDesc

# braid dtype name -> DLPack (code, bits)
_DLPACK = {
    "f32": (2, 32),
    "f16": (2, 16),
    "bf16": (4, 16),
    "f8e4m3": (10, 8),
    "f8e5m2": (12, 8),
    "i32": (0, 32),
    "i64": (0, 64),
    "u8": (1, 8),
}
# torch attribute name -> braid dtype name (float8 types exist from PyTorch 2.1 on)
_TORCH_NAMES = {
    "float32": "f32",
    "float16": "f16",
    "bfloat16": "bf16",
    "float8_e4m3fn": "f8e4m3",
    "float8_e5m2": "f8e5m2",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
}
# numpy array-interface typestr -> braid dtype name (numpy has no bf16 or float8)
_NUMPY_TYPESTR = {"<f4": "f32", "<f2": "f16", "<i4": "i32", "<i8": "i64", "|u1": "u8", "<u1": "u8"}
_NUMPY_NAMES = {"f32": "float32", "f16": "float16", "i32": "int32", "i64": "int64", "u8": "uint8"}


_torch_dtypes = {}  # torch.dtype -> braid dtype name, filled on first use (a dict lookup a call)


def _torch():
    return sys.modules.get("torch")


def _torch_dtype_name(torch, dtype):
    if not _torch_dtypes:
        _torch_dtypes.update({getattr(torch, attr): name for attr, name in _TORCH_NAMES.items()
                              if hasattr(torch, attr)})
    return _torch_dtypes.get(dtype)


def is_torch(value):
    torch = _torch()
    return torch is not None and isinstance(value, torch.Tensor)


def _fail(status, op, arg, expected, given):
    raise BraidError(status, f"{op}: argument '{arg}': expected {expected}, got {given}")


def dtype_name(value):
    """braid's name for a dtype given as a name ("bf16"), a torch.dtype or a numpy dtype."""
    if isinstance(value, str) and value in _DLPACK:
        return value
    torch = _torch()
    if torch is not None and isinstance(value, torch.dtype):
        name = _torch_dtype_name(torch, value)
        if name is not None:
            return name
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            typestr = np.dtype(value).str
        except TypeError:
            typestr = None
        if typestr in _NUMPY_TYPESTR:
            return _NUMPY_TYPESTR[typestr]
    raise BraidError(Status.DTYPE, f"unsupported dtype {value!r}")


def tensor_dtype(op, arg, value):
    """braid's dtype name of a torch tensor or numpy array; BraidError naming op and arg if
    braid has no such dtype."""
    if is_torch(value):
        name = _torch_dtype_name(_torch(), value.dtype)
        if name is None:
            _fail(Status.DTYPE, op, arg, "a dtype braid knows (" + ", ".join(_TORCH_NAMES) + ")",
                  str(value.dtype))
        return name
    return _array_dtype(op, arg, value.__array_interface__["typestr"])


def _array_dtype(op, arg, typestr):
    """braid's dtype name of a numpy array-interface typestr; BraidError naming op and arg."""
    name = _NUMPY_TYPESTR.get(typestr)
    if name is None:
        _fail(Status.DTYPE, op, arg, "a numpy dtype of float32, float16, int32, int64 or uint8",
              f"typestr '{typestr}'")
    return name


class Descriptor:
    """A braid_tensor over `value`'s memory, with the shape/stride arrays it points to kept
    alive. `cuda_device` is the CUDA ordinal, or None for host memory. `u8_as` (a braid dtype
    name of 1-byte elements, e.g. "f8e4m3") describes a uint8 value as that dtype instead: numpy
    has no fp8 dtype, so fp8 codes travel in uint8 arrays."""

    def __init__(self, op, arg, value, writable=False, u8_as=None):
        self.value = value  # keeps the memory alive for the duration of the call
        if is_torch(value):
            data, shape, strides, name, device = self._from_torch(op, arg, value)
        elif hasattr(value, "__array_interface__"):
            data, shape, strides, name, device = self._from_array(op, arg, value, writable)
        else:
            _fail(Status.INVALID_ARGUMENT, op, arg, "a torch.Tensor or a numpy array",
                  type(value).__name__)
        if u8_as is not None and name == "u8":
            name = u8_as
        if len(shape) > MAX_DIMS:
            _fail(Status.SHAPE, op, arg, f"at most {MAX_DIMS} dimensions", f"{len(shape)}")
        self.cuda_device = device[1] if device[0] == DEVICE_CUDA else None
        n = len(shape)
        array = ctypes.c_int64 * max(n, 1)
        code, bits = _DLPACK[name]
        # One constructor call; the arrays become the pointer fields (the struct keeps them alive).
        # A Python caller of a small kernel pays this per tensor, so it stays lean (9 -> 4.4 us
        # a numpy array on the CPU machine, 2026-12-07).
        self.desc = TensorDesc(data or None, Device(*device), n, DType(code, bits, 1),
                               array(*shape), array(*strides), 0)

    def pointer(self):
        """The argument the C functions take (a braid_tensor*), valid while self lives."""
        return ctypes.byref(self.desc)

    @staticmethod
    def _from_torch(op, arg, t):
        name = tensor_dtype(op, arg, t)
        if t.device.type == "cpu":
            device = (DEVICE_CPU, 0)
        elif t.device.type == "cuda":
            index = t.device.index if t.device.index is not None else _torch().cuda.current_device()
            device = (DEVICE_CUDA, index)
        else:
            _fail(Status.DEVICE, op, arg, "a cpu or cuda tensor", f"device {t.device}")
        # data_ptr() already includes the storage offset; strides are in elements, as braid's.
        return t.data_ptr(), tuple(t.shape), tuple(t.stride()), name, device

    @staticmethod
    def _from_array(op, arg, a, writable):
        ai = a.__array_interface__
        name = _array_dtype(op, arg, ai["typestr"])
        data, readonly = ai["data"]
        if writable and readonly:
            _fail(Status.INVALID_ARGUMENT, op, arg, "a writable array", "a read-only array")
        shape = tuple(map(int, ai["shape"]))
        itemsize = _DLPACK[name][1] // 8
        if ai.get("strides") is None:
            strides, step = [0] * len(shape), 1  # C-contiguous
            for i in range(len(shape) - 1, -1, -1):
                strides[i] = step
                step *= shape[i]
        else:
            if any(s % itemsize for s in ai["strides"]):
                _fail(Status.SHAPE, op, arg, "strides that are whole elements",
                      f"byte strides {tuple(ai['strides'])}")
            strides = [s // itemsize for s in ai["strides"]]
        return data, shape, tuple(strides), name, (DEVICE_CPU, 0)


def empty(like, shape, dtype):
    """A new uninitialised tensor/array of `shape` and braid dtype `dtype`, of the same kind
    (torch or numpy) and on the same device as `like`."""
    if is_torch(like):
        torch = _torch()
        torch_dtype = {v: k for k, v in _TORCH_NAMES.items()}[dtype]
        return torch.empty(tuple(shape), dtype=getattr(torch, torch_dtype), device=like.device)
    import numpy as np

    if dtype not in _NUMPY_NAMES:
        raise BraidError(Status.DTYPE, f"numpy has no dtype for braid's {dtype}")
    return np.empty(tuple(shape), dtype=_NUMPY_NAMES[dtype])
