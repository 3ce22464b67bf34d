"""tinytorch.core.training's safetensors reader and writer, against the `safetensors` package."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tinytorch.core.training import (
    SAFETENSORS_INDEX,
    SafetensorsError,
    load_safetensors,
    load_safetensors_folder,
    read_safetensors_header,
    read_safetensors_metadata,
    save_safetensors,
)

st_numpy = pytest.importorskip("safetensors.numpy")


def every_dtype(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "f64": rng.standard_normal((3, 2)),
        "f32": rng.standard_normal((2, 3, 4)).astype(np.float32),
        "f16": rng.standard_normal(7).astype(np.float16),
        "i64": rng.integers(-2**62, 2**62, (4,)),
        "i32": rng.integers(-2**31, 2**31, (2, 2), dtype=np.int32),
        "i16": rng.integers(-2**15, 2**15, (5,), dtype=np.int16),
        "i8": rng.integers(-128, 128, (3,), dtype=np.int8),
        "u64": np.array([0, 2**64 - 1], dtype=np.uint64),
        "u32": np.array([2**32 - 1], dtype=np.uint32),
        "u16": np.array([1, 65535], dtype=np.uint16),
        "u8": np.arange(9, dtype=np.uint8).reshape(3, 3),
        "bool": np.array([[True, False], [False, True]]),
        "scalar": np.array(1.5, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "layer.0.wéight": np.ones(2, dtype=np.float32),  # non-ASCII names are UTF-8 JSON
    }


def file_bytes(header, data=b"", pad=True):
    text = json.dumps(header).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + data


def entry(begin, end, dtype="F32", shape=(2,)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": [begin, end]}


# ---- round trips and the reference implementation ---------------------------------------
@pytest.mark.parametrize("metadata", [None, {}, {"format": "np"}])
def test_bytes_identical_to_safetensors_package(tmp_path, metadata):
    tensors = every_dtype()
    ours = tmp_path / "ours.safetensors"
    save_safetensors(ours, tensors, metadata=metadata)
    assert ours.read_bytes() == st_numpy.save(tensors, metadata=metadata)


def test_same_layout_as_package_with_several_metadata_keys(tmp_path):
    """The package writes metadata keys in a hash map's random order, so with several keys
    only the parsed header and the data can be compared."""
    tensors, metadata = every_dtype(), {"format": "np", "note": "ünïcode", "b": "1"}
    save_safetensors(tmp_path / "ours.safetensors", tensors, metadata=metadata)
    ours, theirs = (tmp_path / "ours.safetensors").read_bytes(), st_numpy.save(tensors, metadata)
    n = int.from_bytes(ours[:8], "little")
    assert ours[:8] == theirs[:8]
    assert json.loads(ours[8:8 + n]) == json.loads(theirs[8:8 + n])
    assert ours[8 + n:] == theirs[8 + n:]


def test_round_trip_every_dtype(tmp_path):
    tensors = every_dtype(1)
    save_safetensors(tmp_path / "a.safetensors", tensors, metadata={"k": "v"})
    loaded = load_safetensors(tmp_path / "a.safetensors")
    assert loaded.keys() == tensors.keys()
    for name, array in tensors.items():
        assert loaded[name].dtype == array.dtype and loaded[name].shape == array.shape, name
        np.testing.assert_array_equal(loaded[name], array)
    assert read_safetensors_metadata(tmp_path / "a.safetensors") == {"k": "v"}


def test_files_of_the_package_load_and_ours_load_in_the_package(tmp_path):
    tensors = every_dtype(2)
    theirs = tmp_path / "theirs.safetensors"
    st_numpy.save_file(tensors, theirs, metadata={"format": "np"})
    mine = load_safetensors(theirs)
    for name, array in tensors.items():
        np.testing.assert_array_equal(mine[name], array)
        assert mine[name].dtype == array.dtype
    assert read_safetensors_metadata(theirs) == {"format": "np"}

    ours = tmp_path / "ours.safetensors"
    save_safetensors(ours, tensors)
    back = st_numpy.load_file(ours)
    for name, array in tensors.items():
        np.testing.assert_array_equal(back[name], array)
        assert back[name].dtype == array.dtype


def test_bf16_written_by_torch_is_widened_exactly(tmp_path):
    torch = pytest.importorskip("torch")
    st_torch = pytest.importorskip("safetensors.torch")
    generator = torch.Generator().manual_seed(0)
    values = torch.randn(3, 5, generator=generator).to(torch.bfloat16)
    path = tmp_path / "bf16.safetensors"
    st_torch.save_file({"w": values, "b": torch.arange(4, dtype=torch.int64)}, path)
    loaded = load_safetensors(path)
    assert loaded["w"].dtype == np.float32 and loaded["w"].shape == (3, 5)
    np.testing.assert_array_equal(loaded["w"], values.float().numpy())
    np.testing.assert_array_equal(loaded["b"], np.arange(4))


def test_big_endian_and_strided_input_are_written_little_endian_c_order(tmp_path):
    a = np.arange(12, dtype=">f4").reshape(3, 4).T  # big-endian and not C-contiguous
    save_safetensors(tmp_path / "a.safetensors", {"a": a})
    raw = (tmp_path / "a.safetensors").read_bytes()
    assert raw.endswith(np.ascontiguousarray(a, dtype="<f4").tobytes())
    np.testing.assert_array_equal(load_safetensors(tmp_path / "a.safetensors")["a"], a)


def test_header_is_padded_to_eight_and_data_start_reported(tmp_path):
    path = tmp_path / "a.safetensors"
    save_safetensors(path, {"x": np.zeros(3, np.uint8)})
    n = int.from_bytes(path.read_bytes()[:8], "little")
    header, start = read_safetensors_header(path)
    assert n % 8 == 0 and start == 8 + n
    assert header == {"x": {"dtype": "U8", "shape": [3], "data_offsets": [0, 3]}}


def test_saved_file_has_the_usual_permissions(tmp_path):
    """Written through a temporary file, but readable as a file from open() would be."""
    umask = os.umask(0o022)
    os.umask(umask)
    save_safetensors(tmp_path / "a.safetensors", {"a": np.zeros(1)})
    assert (tmp_path / "a.safetensors").stat().st_mode & 0o777 == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == ["a.safetensors"]


def test_empty_checkpoint(tmp_path):
    save_safetensors(tmp_path / "e.safetensors", {})
    assert load_safetensors(tmp_path / "e.safetensors") == {}
    assert (tmp_path / "e.safetensors").read_bytes() == st_numpy.save({})


def test_writer_refuses_what_has_no_safetensors_dtype(tmp_path):
    with pytest.raises(SafetensorsError, match="'z'.*complex128"):
        save_safetensors(tmp_path / "a.safetensors", {"z": np.zeros(2, np.complex128)})
    with pytest.raises(SafetensorsError, match="__metadata__"):
        save_safetensors(tmp_path / "a.safetensors", {"__metadata__": np.zeros(2)})
    with pytest.raises(TypeError, match="strings"):
        save_safetensors(tmp_path / "a.safetensors", {"a": np.zeros(2)}, metadata={"n": 1})
    assert not list(tmp_path.iterdir()), "a refused save leaves no file behind"


# ---- memory mapping ---------------------------------------------------------------------
def test_arrays_are_read_only_views_of_the_file(tmp_path):
    path = tmp_path / "a.safetensors"
    save_safetensors(path, every_dtype())
    for name, array in load_safetensors(path).items():
        if array.size == 0:  # NumPy gives a plain empty array for an empty slice
            continue
        assert isinstance(array, np.memmap), name
        assert not array.flags.writeable, name
        assert not array.flags.owndata, name
    with pytest.raises(ValueError):
        load_safetensors(path)["f32"][0] += 1


def test_loading_a_large_file_does_not_copy_it(tmp_path):
    """Peak RSS of a fresh process: memmap loading adds far less than the file's size, while
    reading the same data into memory adds all of it (so the measure can see a copy)."""
    size = 128 * 2**20
    path = tmp_path / "big.safetensors"
    header = {"w": entry(0, size, shape=(size // 4,))}
    with open(path, "wb") as handle:
        handle.write(file_bytes(header))
        handle.truncate(handle.tell() + size)  # a sparse file: no 128 MB written to disk
    script = textwrap.dedent(f"""
        import numpy as np, sys
        from tinytorch.core.training import load_safetensors
        def peak():
            for line in open("/proc/self/status"):
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        before = peak()
        tensors = load_safetensors({str(path)!r})
        assert tensors["w"].shape == ({size // 4},)
        mapped = peak() - before
        copy = np.fromfile({str(path)!r}, dtype=np.uint8)
        copied = peak() - before
        print(mapped, copied)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True)
    mapped, copied = map(int, out.stdout.split())
    assert copied > 0.9 * size, f"the control (a real copy) raised peak RSS by only {copied}"
    assert mapped < 0.1 * size, f"loading raised peak RSS by {mapped} bytes for a {size} file"


# ---- corrupt files ----------------------------------------------------------------------
GOOD = {"a": entry(0, 8), "b": entry(8, 11, dtype="U8", shape=(3,))}
CORRUPT = {  # name: (file bytes, tensor the message must name or None)
    "empty file": (b"", None),
    "five bytes": (b"\x01\x02\x03\x04\x05", None),
    "header length past the end": ((1000).to_bytes(8, "little") + b"{}", None),
    "header length 2**64-1": ((2**64 - 1).to_bytes(8, "little") + b"{}", None),
    "header not JSON": ((8).to_bytes(8, "little") + b"not json", None),
    "header not UTF-8": ((8).to_bytes(8, "little") + b"\xff\xfe{}    ", None),
    "header a JSON list": (file_bytes([1, 2]), None),
    "metadata not strings": (file_bytes({"__metadata__": {"n": 1}}), None),
    "entry not an object": (file_bytes({"w": [0, 8]}, bytes(8)), "w"),
    "missing data_offsets": (file_bytes({"w": {"dtype": "F32", "shape": [2]}}, bytes(8)), "w"),
    "unknown dtype": (file_bytes({"w": entry(0, 8, dtype="F12")}, bytes(8)), "w"),
    "FP8 dtype": (file_bytes({"w": entry(0, 8, dtype="F8_E4M3", shape=(8,))}, bytes(8)), "w"),
    "negative dimension": (file_bytes({"w": entry(0, 8, shape=(-2,))}, bytes(8)), "w"),
    "float dimension": (file_bytes({"w": entry(0, 8, shape=(2.0,))}, bytes(8)), "w"),
    "size not shape x itemsize": (file_bytes({"w": entry(0, 4)}, bytes(4)), "w"),
    "negative begin": (file_bytes({"w": entry(-8, 0)}, bytes(8)), "w"),
    "reversed offsets": (file_bytes({"w": entry(8, 0)}, bytes(8)), "w"),
    "three offsets": (file_bytes({"w": {**entry(0, 8), "data_offsets": [0, 4, 8]}},
                                 bytes(8)), "w"),
    "offsets past the data": (file_bytes({"w": entry(8, 16)}, bytes(8)), "w"),
    "truncated data": (file_bytes(GOOD, bytes(11))[:-2], "b"),
    "overlap": (file_bytes({"w": entry(0, 8), "v": entry(4, 12)}, bytes(12)), "v"),
    "same bytes twice": (file_bytes({"w": entry(0, 8), "v": entry(0, 8)}, bytes(8)), None),
    "hole": (file_bytes({"w": entry(0, 8), "v": entry(12, 20)}, bytes(20)), "v"),
    "trailing bytes": (file_bytes({"w": entry(0, 8)}, bytes(12)), None),
}


@pytest.mark.parametrize("case", sorted(CORRUPT))
def test_corrupt_file_raises_naming_file_and_tensor(tmp_path, case):
    content, tensor = CORRUPT[case]
    path = tmp_path / "broken.safetensors"
    path.write_bytes(content)
    with pytest.raises(SafetensorsError) as caught:
        load_safetensors(path)
    message = str(caught.value)
    assert "broken.safetensors" in message, message
    if tensor is not None:
        assert repr(tensor) in message, message
    # the reference implementation refuses the file too (its error type varies by case)
    with pytest.raises(Exception):  # noqa: B017
        st_numpy.load_file(path)


def test_missing_file(tmp_path):
    with pytest.raises(SafetensorsError, match="no safetensors file"):
        load_safetensors(tmp_path / "nothing.safetensors")


def test_unpadded_header_is_accepted_as_the_spec_allows(tmp_path):
    path = tmp_path / "a.safetensors"
    path.write_bytes(file_bytes({"w": entry(0, 8)}, np.ones(2, np.float32).tobytes(), pad=False))
    np.testing.assert_array_equal(load_safetensors(path)["w"], np.ones(2))


# ---- folders and shards -----------------------------------------------------------------
def test_sharded_folder_written_by_transformers(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=50,
                                     n_positions=16)
    model = transformers.GPT2LMHeadModel(config)
    model.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / SAFETENSORS_INDEX).is_file()
    assert len(list(tmp_path.glob("*.safetensors"))) > 2
    loaded = load_safetensors_folder(tmp_path)
    state = {k: v for k, v in model.state_dict().items()
             if k in json.loads((tmp_path / SAFETENSORS_INDEX).read_text())["weight_map"]}
    assert loaded.keys() == state.keys()
    for name, value in state.items():
        np.testing.assert_array_equal(loaded[name], value.numpy(), err_msg=name)


def test_folder_forms(tmp_path):
    a = np.arange(3, dtype=np.float32)
    (tmp_path / "one").mkdir()
    save_safetensors(tmp_path / "one" / "model.safetensors", {"a": a})
    np.testing.assert_array_equal(load_safetensors_folder(tmp_path / "one")["a"], a)
    np.testing.assert_array_equal(
        load_safetensors_folder(tmp_path / "one" / "model.safetensors")["a"], a)
    (tmp_path / "other").mkdir()
    save_safetensors(tmp_path / "other" / "weights.safetensors", {"a": a})
    np.testing.assert_array_equal(load_safetensors_folder(tmp_path / "other")["a"], a)
    save_safetensors(tmp_path / "other" / "more.safetensors", {"b": a})
    with pytest.raises(SafetensorsError, match="2 .safetensors files"):
        load_safetensors_folder(tmp_path / "other")
    with pytest.raises(SafetensorsError, match="no checkpoint"):
        load_safetensors_folder(tmp_path / "missing")


def test_bad_index(tmp_path):
    save_safetensors(tmp_path / "s1.safetensors", {"a": np.zeros(2, np.float32)})
    index = tmp_path / SAFETENSORS_INDEX
    index.write_text("{not json")
    with pytest.raises(SafetensorsError, match="weight_map"):
        load_safetensors_folder(tmp_path)
    index.write_text(json.dumps({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}}))
    with pytest.raises(SafetensorsError, match="'b'.*s2.safetensors.*missing"):
        load_safetensors_folder(tmp_path)
    index.write_text(json.dumps({"weight_map": {"a": "s1.safetensors", "z": "s1.safetensors"}}))
    with pytest.raises(SafetensorsError, match="'z'"):
        load_safetensors_folder(tmp_path)


def test_corrupt_shard_names_the_shard(tmp_path):
    (tmp_path / "s1.safetensors").write_bytes(b"\x00" * 5)
    (tmp_path / SAFETENSORS_INDEX).write_text(json.dumps({"weight_map": {"a": "s1.safetensors"}}))
    with pytest.raises(SafetensorsError, match="s1.safetensors"):
        load_safetensors_folder(tmp_path)
