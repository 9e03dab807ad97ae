"""frameworks/import_plan.py's mappers refuse oversized input before building anything (issue 36, finding 3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from parplan.library.spec_io import load_spec_file
from parplan.costmodel.errors import ParplanError
from parplan.frameworks.import_plan import ImportPlanError, layout_chunks, spec_from_deepspeed

SEED = Path(__file__).resolve().parents[2] / "examples" / "seed-textbook-70b-8k.yaml"


@pytest.mark.parametrize("layout", ["Et*99999999999|tL", "E(tt)*600000|L", "t*1000001"])
def test_a_layout_that_unrolls_past_the_layer_cap_is_refused(layout):
    with pytest.raises(ImportPlanError, match="pipeline-model-parallel-layout"):
        layout_chunks(layout)


def test_a_layout_within_the_cap_unrolls():
    assert layout_chunks("Et*3|(tt)*2|tL") == [3, 4, 1]


def test_a_deepspeed_number_of_thousands_of_digits_is_a_parplan_error():
    with pytest.raises(ParplanError, match="DeepSpeed JSON"):
        spec_from_deepspeed('{"train_micro_batch_size_per_gpu": ' + "9" * 5000 + "}", load_spec_file(SEED))
