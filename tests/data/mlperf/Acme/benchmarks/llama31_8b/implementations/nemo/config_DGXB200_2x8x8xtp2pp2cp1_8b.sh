source $(dirname ${BASH_SOURCE[0]})/config_common.sh

export MINIBS=8
export TENSOR_MODEL_PARALLEL=2
export PIPELINE_MODEL_PARALLEL=2
export INTERLEAVED_PIPELINE=null
export CONTEXT_PARALLEL=1
export SEQ_PARALLEL=True
export ASYM_PP_EMBED=True
export ASYM_PP_LOSS=True
export DGXNNODES=2
export DGXNGPU=8
