"""The training configs' ranges and choices, declared on their fields (issue 67): a bad value from the command line
is still a ConfigError naming its key."""

import pytest

from router_train.fit_features import FitFeaturesConfig
from router_train.lm.grpo import GRPORecipeConfig
from router_train.lm.sft import SFTRecipeConfig
from router_train.reader.chat_floor import ChatFloorConfig
from router_train.reader.pretrain import ReaderPretrainConfig
from router_train.reader.unit_reader import UnitReaderConfig
from tiermem.settings.config import parse_config
from tiermem.settings.errors import ConfigError

BAD = [(UnitReaderConfig, "deep_negatives=-1", "deep_negatives must be >= 0"),
       (UnitReaderConfig, "deep_positives=-1", "deep_positives must be >= 0"),
       (UnitReaderConfig, "max_epochs=0", "max_epochs must be >= 1"),
       (UnitReaderConfig, "learning_rate=0", "learning_rate must be > 0"),
       (UnitReaderConfig, "warmup_share=1", "warmup_share must be < 1"),
       (UnitReaderConfig, "cv_folds=1", "cv_folds must be 0"),
       (UnitReaderConfig, "poolings=[mean]", "poolings must be names from"),
       (UnitReaderConfig, "text_scores=[]", "text_scores must be names from"),
       (ReaderPretrainConfig, "max_length=8", "max_length must be >= 16"),
       (ReaderPretrainConfig, "max_length=513", "max_length must be <= 512"),
       (ReaderPretrainConfig, "heldout_articles=0", "heldout_articles must be >= 1"),
       (ReaderPretrainConfig, "span_weight=-0.5", "span_weight must be >= 0"),
       (ChatFloorConfig, "max_molweni=-1", "max_molweni must be >= 0"),
       (ChatFloorConfig, "turn_k=0", "turn_k must be >= 1"),
       (FitFeaturesConfig, "kind=linear", "kind must be one of features|top1-score, got 'linear'"),
       (FitFeaturesConfig, "class_weight=auto", "class_weight must be one of balanced|none"),
       (FitFeaturesConfig, "l2=-1", "l2 must be >= 0"),
       (SFTRecipeConfig, "balance=smote", "balance must be one of none|oversample"),
       (SFTRecipeConfig, "lora.top_layers=0", "lora.top_layers must be >= 1"),
       (SFTRecipeConfig, "loss.text_weight=-1", "loss.text_weight must be >= 0"),
       (GRPORecipeConfig, "max_zero_variance=1.5", "max_zero_variance must be <= 1"),
       (GRPORecipeConfig, "patience=-1", "patience must be >= 0")]


@pytest.mark.parametrize(("cls", "override", "message"), BAD, ids=[b[1] for b in BAD])
def test_a_value_outside_its_declared_range_or_choices_is_refused_by_key(cls, override, message):
    with pytest.raises(ConfigError, match=message.replace("|", r"\|")):
        parse_config(cls, None, [override])


@pytest.mark.parametrize("cls", [ReaderPretrainConfig, FitFeaturesConfig])
def test_an_infinity_in_a_ranged_field_built_in_python_is_refused(cls):
    name = "span_weight" if cls is ReaderPretrainConfig else "l2"
    with pytest.raises(ConfigError, match=f"{name}: must be a finite number"):
        cls(**{name: float("inf")})
