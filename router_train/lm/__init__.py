"""The language-model router: SFT and GRPO of a LoRA adapter on the label rows, their losses, rewards and metrics."""
