export USE_DIST_OPTIMIZER=True
export FP8=True
export MICRO_BATCH_SIZE=1
