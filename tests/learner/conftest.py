import pytest
import torch


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models run fastest on one thread, and far faster when other processes share the cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture()
def fresh(tiny_model_dir):
    """(model, tokenizer): the tiny model loaded anew, seeded, on one thread (the update tests change it)."""
    from masdsl.plan.models import load_model

    torch.set_num_threads(1)
    torch.manual_seed(0)
    return load_model(tiny_model_dir)
