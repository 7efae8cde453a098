import pytest
import torch

from pipeline.transfer.base import TransferExpiredError
from pipeline.transfer.cuda_ipc import CudaIpcTransport, decode_ipc_args, encode_ipc_args


def test_ipc_args_round_trip_without_pickle():
    args = (
        torch.Tensor,
        torch.Size([2, 3]),
        (3, 1),
        0,
        torch.UntypedStorage,
        torch.bfloat16,
        0,
        b"\x01ipc-handle",
        4096,
        0,
        False,
        b"ref",
        8,
        b"evt",
        True,
    )
    assert decode_ipc_args(encode_ipc_args(args)) == args


def test_malformed_handles_are_rejected_cleanly():
    for bad in ("not base64 !!", "aGVsbG8=", ""):
        with pytest.raises(TransferExpiredError, match="malformed"):
            decode_ipc_args(bad)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")
def test_without_cuda_the_transport_says_use_shm():
    with pytest.raises(Exception, match="use shm"):
        CudaIpcTransport()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_ipc_round_trip_in_process():
    from pipeline.transfer.base import ExportPool

    pool = ExportPool(CudaIpcTransport(), "w", max_bytes=1 << 20)
    handle, buf = pool.export((1, 2, 1, 4, 8), torch.float16)
    buf.fill_(2.0)
    with CudaIpcTransport().attach(handle) as kv:
        assert float(kv.float().sum()) == 128.0
