"""Random ops on the device generator: every draw runs natively, a seed reproduces values,
get/set_rng_state round-trips, and each distribution passes mean and variance checks.

The statistical checks use 200k samples and bounds of about 6 standard errors, so a correct
sampler fails them with negligible probability while a wrong parameterisation (a mean or
scale off by a few percent, a missing category, a repeat in a permutation) fails them."""
import math

import pytest
import torch
import torch_tpu

TPU = "tpu"
N = 200_000


@pytest.fixture(autouse=True)
def _native_only():
    torch_tpu.metrics.reset()
    yield
    fallbacks = torch_tpu.metrics()["cpu_fallbacks_by_op"]
    assert not fallbacks, f"ran on the CPU: {fallbacks}"


def empty(n=N, dtype=torch.float32):
    return torch.empty(n, device=TPU, dtype=dtype)


def assert_moments(x, mean, var, rel=0.03):
    x = x.double().cpu()
    se_mean = math.sqrt(var / x.numel())
    assert abs(x.mean().item() - mean) < 6 * se_mean + 1e-9, (x.mean().item(), mean)
    assert abs(x.var().item() - var) < rel * var + 1e-9, (x.var().item(), var)


# ---- distributions ----

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_uniform(dtype):
    x = empty(dtype=dtype).uniform_(-2, 3)
    c = x.float().cpu()
    assert c.min() >= -2 and c.max() <= 3
    assert_moments(x, 0.5, 25 / 12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_normal_(dtype):
    assert_moments(empty(dtype=dtype).normal_(1.5, 2.0), 1.5, 4.0)


def test_normal_tensor_mean_and_std():
    mean = torch.full((N,), -1.0, device=TPU)
    std = torch.full((N,), 0.5, device=TPU)
    assert_moments(torch.normal(mean, std), -1.0, 0.25)
    assert_moments(torch.normal(mean, 3.0), -1.0, 9.0)
    assert_moments(torch.normal(2.0, std), 2.0, 0.25)


def test_randn_and_rand():
    assert_moments(torch.randn(N, device=TPU), 0.0, 1.0)
    assert_moments(torch.rand(N, device=TPU), 0.5, 1 / 12)


def test_bernoulli():
    x = empty().bernoulli_(0.3)
    assert set(x.cpu().unique().tolist()) <= {0.0, 1.0}
    assert_moments(x, 0.3, 0.21)
    p = torch.full((N,), 0.8, device=TPU)
    assert_moments(torch.bernoulli(p), 0.8, 0.16)
    assert_moments(empty().bernoulli_(p), 0.8, 0.16)


def test_random_integers():
    x = empty(dtype=torch.int64).random_(3, 13)
    c = x.cpu()
    assert c.min() == 3 and c.max() == 12
    assert_moments(x, 7.5, (10 ** 2 - 1) / 12)
    y = empty(dtype=torch.int32).random_(5).cpu()
    assert y.min() == 0 and y.max() == 4
    b = empty(dtype=torch.bool).random_().cpu()
    assert 0.45 < b.float().mean() < 0.55


def test_exponential():
    assert_moments(empty().exponential_(2.0), 0.5, 0.25)


def test_geometric():
    x = empty().geometric_(0.25)
    assert x.cpu().min() >= 1
    assert_moments(x, 4.0, 0.75 / 0.0625)


def test_log_normal():
    mu, sigma = 0.1, 0.4
    mean = math.exp(mu + sigma ** 2 / 2)
    var = (math.exp(sigma ** 2) - 1) * math.exp(2 * mu + sigma ** 2)
    assert_moments(empty().log_normal_(mu, sigma), mean, var, rel=0.05)


def test_cauchy_quartiles():
    x = empty().cauchy_(1.0, 2.0).cpu()
    q = torch.quantile(x[:100_000], torch.tensor([0.25, 0.5, 0.75]))
    assert torch.allclose(q, torch.tensor([-1.0, 1.0, 3.0]), atol=0.06)


def test_randperm():
    for n in (1, 7, 1000):
        p = torch.randperm(n, device=TPU)
        assert p.device.type == TPU and p.dtype == torch.int64
        assert torch.equal(p.cpu().sort().values, torch.arange(n))
    firsts = torch.stack([torch.randperm(5, device=TPU)[0] for _ in range(2000)]).cpu()
    counts = torch.bincount(firsts, minlength=5).float()
    assert (counts - 400).abs().max() < 6 * math.sqrt(400 * 0.8)


@pytest.mark.parametrize("replacement", [True, False])
def test_multinomial_frequencies(replacement):
    w = torch.tensor([1.0, 0.0, 3.0, 6.0])
    draws = 20_000 if replacement else 1
    rows = 1 if replacement else 20_000
    probs = w.repeat(rows, 1).to(TPU)
    s = torch.multinomial(probs, draws, replacement=replacement).cpu().flatten()
    counts = torch.bincount(s, minlength=4).float()
    assert counts[1] == 0, "a zero-weight category was drawn"
    expected = w / w.sum() * s.numel()
    assert ((counts - expected).abs() <= 6 * (expected * (1 - w / w.sum())).sqrt() + 1).all(), counts


def test_multinomial_without_replacement_is_a_permutation():
    p = torch.rand(50, 8, device=TPU) + 0.01
    s = torch.multinomial(p, 8).cpu()
    assert torch.equal(s.sort(dim=1).values, torch.arange(8).expand(50, 8))


def test_multinomial_second_draw_follows_remaining_mass():
    # First and second picks of sampling without replacement from weights [1, 2, 7]: the
    # second pick's distribution is known in closed form.
    w = torch.tensor([1.0, 2.0, 7.0])
    s = torch.multinomial(w.repeat(40_000, 1).to(TPU), 2).cpu()
    p = w / w.sum()
    second = torch.zeros(3)
    for i in range(3):
        for j in range(3):
            if i != j:
                second[j] += p[i] * p[j] / (1 - p[i])
    freq = torch.bincount(s[:, 1], minlength=3).float() / s.shape[0]
    assert torch.allclose(freq, second, atol=0.015), (freq, second)


# ---- reproducibility ----

DRAWS = {
    "uniform_": lambda: empty(1000).uniform_(),
    "normal_": lambda: empty(1000).normal_(),
    "bernoulli_": lambda: empty(1000).bernoulli_(0.5),
    "random_": lambda: empty(1000, torch.int64).random_(0, 100),
    "exponential_": lambda: empty(1000).exponential_(),
    "randperm": lambda: torch.randperm(100, device=TPU),
    "multinomial": lambda: torch.multinomial(torch.ones(10, 10, device=TPU), 3),
    "randn": lambda: torch.randn(1000, device=TPU),
}


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_same_seed_same_values(name):
    draw = DRAWS[name]
    torch.manual_seed(1234)
    a = draw().cpu()
    b = draw().cpu()
    torch.manual_seed(1234)
    c = draw().cpu()
    assert torch.equal(a, c)
    assert not torch.equal(a, b), "consecutive draws repeated"


def test_tpu_manual_seed_and_generator_objects():
    torch.tpu.manual_seed(7)
    a = torch.rand(100, device=TPU).cpu()
    torch.tpu.manual_seed(7)
    assert torch.equal(a, torch.rand(100, device=TPU).cpu())
    g = torch.Generator(device=TPU)
    g.manual_seed(99)
    x = torch.empty(100, device=TPU).uniform_(generator=g).cpu()
    g.manual_seed(99)
    assert torch.equal(x, torch.empty(100, device=TPU).uniform_(generator=g).cpu())
    assert not torch.equal(x, a)


def test_rng_state_round_trip():
    torch.manual_seed(3)
    torch.rand(10, device=TPU)
    state = torch.tpu.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    a = torch.randn(500, device=TPU).cpu()
    b = torch.randperm(50, device=TPU).cpu()
    torch.tpu.set_rng_state(state)
    assert torch.equal(torch.tpu.get_rng_state(), state)
    assert torch.equal(torch.randn(500, device=TPU).cpu(), a)
    assert torch.equal(torch.randperm(50, device=TPU).cpu(), b)


def test_rng_state_on_a_device_is_refused_like_the_cpu():
    """A generator reads its state's bytes on the host: a state tensor on tpu raised nothing and
    read the device storage's address as host memory (a segfault); now the CPU's TypeError."""
    state = torch.tpu.get_rng_state()
    with pytest.raises(TypeError, match="RNG state must be a torch.ByteTensor") as cpu_error:
        torch.Generator().set_state(state.to(TPU))
    for set_state in (torch.tpu.set_rng_state, torch.Generator(TPU).set_state):
        with pytest.raises(TypeError) as tpu_error:
            set_state(state.to(TPU))
        assert str(tpu_error.value) == str(cpu_error.value)
    with pytest.raises(TypeError, match="RNG state must be a torch.ByteTensor"):
        torch.tpu.set_rng_state(state.float())
    torch.tpu.set_rng_state(state)  # the host state still works
    assert torch.equal(torch.tpu.get_rng_state(), state)


def test_fork_rng_restores_the_device_stream():
    torch.manual_seed(5)
    with torch.random.fork_rng(devices=[0], device_type=TPU):
        torch.rand(10, device=TPU)
    after = torch.rand(10, device=TPU).cpu()
    torch.manual_seed(5)
    assert torch.equal(after, torch.rand(10, device=TPU).cpu())


def test_dropout_reproducible_and_scaled():
    torch.manual_seed(11)
    x = torch.ones(N, device=TPU)
    y = torch.nn.functional.dropout(x, 0.25, training=True)
    torch.manual_seed(11)
    assert torch.equal(y.cpu(), torch.nn.functional.dropout(x, 0.25, training=True).cpu())
    c = y.cpu()
    assert set(c.unique().tolist()) <= {0.0, torch.tensor(1 / 0.75).item()}
    assert_moments(y, 1.0, 0.25 / 0.75)


def test_attention_without_dropout_leaves_the_generator_alone():
    # As on CPU and CUDA: only dropout draws. T5's beam sampling with and without the KV cache
    # (Transformers' test_generate_with_past_key_values) diverged because every attention call
    # advanced the generator by its output size, and the cache changes those sizes.
    q = torch.randn(1, 2, 4, 8, device="tpu")
    torch.manual_seed(0)
    want = torch.rand(3, device="tpu").cpu()
    torch.manual_seed(0)
    torch.nn.functional.scaled_dot_product_attention(q, q, q)
    torch.nn.functional.dropout(q, p=0.5, training=False)
    assert torch.equal(torch.rand(3, device="tpu").cpu(), want)
    torch.manual_seed(0)
    torch.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    assert not torch.equal(torch.rand(3, device="tpu").cpu(), want)  # dropout draws
    compiled = torch.compile(lambda x: torch.nn.functional.scaled_dot_product_attention(x, x, x), backend="tpu")
    torch.manual_seed(0)
    compiled(q)
    assert torch.equal(torch.rand(3, device="tpu").cpu(), want)
