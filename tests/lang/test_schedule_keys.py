"""The schedule keys of a policy block (`lr`, `train_every`, `frozen_until`) and `train { alternate }`
as `masdsl check` sees them: values out of range and unknown policy names, with their location."""

from __future__ import annotations

from pathlib import Path

from masdsl.lang import analyze


def test_check_locates_schedule_mistakes(registry):
    text = (Path(__file__).parent / "valid.mas").read_text()
    bad = text.replace('policy shared { model: "smollm2-135m-instruct" }',
                       'policy shared { model: "smollm2-135m-instruct", train_every: 0, lr: -1 }').replace(
        "train { samples: 4,", 'train { alternate: ["shared", "shard"], alternate_every: 2, samples: 4,')
    a = analyze(bad, "w.mas", None, registry=registry)
    got = [(d.code, d.span.line, d.span.col, d.help) for d in a.errors]
    assert got == [("invalid-value", 5, 62, None), ("invalid-value", 5, 69, None),
                   ("unknown-policy", 36, 31, 'did you mean `"shared"`?')]


def test_lsp_completes_the_schedule_keys(registry):
    import pytest

    pytest.importorskip("lsprotocol")
    from masdsl.lsp.completion import complete
    from masdsl.lsp.state import DocState

    text = (Path(__file__).parent / "valid.mas").read_text()
    st = DocState("w.mas", registry=registry)
    st.update(text)
    in_policy = text.index('model: "smollm2')
    assert {"lr", "train_every", "frozen_until"} <= {i.label for i in complete(st, in_policy)}
    in_train = text.index("samples: 4, batch")
    assert {"alternate", "alternate_every"} <= {i.label for i in complete(st, in_train)}
