"""The demo's step names, apart from the demo itself: the CLI's help lists them without importing the demo."""

STEPS = ("label", "reader_pretrain", "reader", "sft", "grpo", "features", "calibrate", "eval")
