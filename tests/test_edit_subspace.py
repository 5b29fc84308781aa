"""tools/edit_subspace.py's energy measure: the share of a vector's squared norm in the span of a
basis' first k rows."""
import torch

from tools.edit_subspace import energy


def test_energy_is_one_inside_the_span_and_zero_outside():
    basis = torch.linalg.qr(torch.randn(8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0)))[0].T
    inside = 2.0 * basis[0] - 3.0 * basis[2]
    outside = basis[5] + basis[7]
    e = energy(torch.stack([inside, outside]), basis, 3)
    assert torch.allclose(e, torch.tensor([1.0, 0.0], dtype=torch.float64), atol=1e-12)


def test_energy_of_a_mixed_vector_is_its_share():
    basis = torch.eye(4, dtype=torch.float64)
    x = torch.tensor([[3.0, 0.0, 4.0, 0.0]], dtype=torch.float64)
    assert torch.allclose(energy(x, basis, 1), torch.tensor([9.0 / 25.0], dtype=torch.float64))
    assert torch.allclose(energy(x, basis, 3), torch.tensor([1.0], dtype=torch.float64))
