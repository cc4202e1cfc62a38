import json

import pytest

from xlnet_tf.config import MODEL_SIZES, ConfigError, RunOptions, XLNetConfig

PUBLISHED_LARGE = {"d_head": 64, "d_inner": 4096, "d_model": 1024, "ff_activation": "gelu", "n_head": 16,
                   "n_layer": 24, "n_token": 32000, "untie_r": True}


def test_reads_and_writes_published_keys(tmp_path):
    path = tmp_path / "xlnet_config.json"
    path.write_text(json.dumps(PUBLISHED_LARGE))
    config = XLNetConfig.from_json(path)
    assert config == MODEL_SIZES["large"]
    config.to_json(tmp_path / "out.json")
    assert json.loads((tmp_path / "out.json").read_text()) == PUBLISHED_LARGE


def test_bad_config_names_file_and_line(tmp_path):
    path = tmp_path / "xlnet_config.json"
    path.write_text('{\n  "d_model": 8,\n  oops\n}')
    with pytest.raises(ConfigError, match=r"xlnet_config.json:3"):
        XLNetConfig.from_json(path)
    path.write_text(json.dumps({**PUBLISHED_LARGE, "d_modle": 3}))
    with pytest.raises(ConfigError, match="unknown key.*d_modle"):
        XLNetConfig.from_json(path)
    path.write_text(json.dumps({**PUBLISHED_LARGE, "ff_activation": "swish"}))
    with pytest.raises(ConfigError, match="ff_activation must be one of"):
        XLNetConfig.from_json(path)


def test_run_options_are_separate_and_validated():
    options = RunOptions(mem_len=384, reuse_len=256, bi_data=True, clamp_len=-1, attn_type="bi")
    assert options.replace(mem_len=0).mem_len == 0
    assert "mem_len" not in XLNetConfig().to_dict()
    with pytest.raises(ConfigError, match="attn_type"):
        RunOptions(attn_type="both")
    with pytest.raises(ConfigError, match="unknown key"):
        RunOptions.from_dict({"dropuot": 0.1})
