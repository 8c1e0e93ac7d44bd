"""The model loader's consistency checks: the dense part's declared widths against the embeddings
that feed it (one clear error naming the field and the width it must have)."""

import tomllib

import pytest

import perfmodel as pm
from perfmodel.config import DATA_DIR
from perfmodel.workload import parse_model


def _mlperf(old: str, new: str) -> dict:
    text = DATA_DIR.joinpath("models", "dlrm-dcnv2-mlperf.toml").read_text()
    assert old in text
    return tomllib.loads(text.replace(old, new, 1))


def test_every_bundled_preset_loads():
    for name in pm.model_names():
        pm.load_model(name)


def test_a_dcnv2_width_that_is_not_the_embeddings_plus_the_bottom_output_is_refused():
    # MLPerf: 26 tables of dim 128 and a bottom MLP ending at 128: the cross network is 3,456 wide
    with pytest.raises(pm.ConfigError) as e:
        parse_model(_mlperf("width = 3456", "width = 5248"), "m.toml")
    msg = str(e.value)
    assert "m.toml: field 'dense.layers[1].width': is 5,248" in msg and "(128)" in msg and "(3,328)" in msg
    assert msg.endswith("3,456")


def test_an_mlp_after_a_layer_takes_its_output():
    with pytest.raises(pm.ConfigError) as e:
        parse_model(_mlperf("input = 3456", "input = 3000"), "m.toml")
    assert "dense.layers[2].input': is 3000; it takes the output of layer" in str(e.value) and "3456 wide" in str(e.value)


def test_a_dot_interaction_counts_the_tables_and_the_bottom_output():
    text = DATA_DIR.joinpath("models", "dlrm-small.toml").read_text()
    for old, new, field, want in (("features = 9 ", "features = 8 ", "features", ": 9"),
                                  ("widths = [256, 64]", "widths = [256, 32]", "dim", "32, 64")):
        with pytest.raises(pm.ConfigError) as e:
            parse_model(tomllib.loads(text.replace(old, new)), "s.toml")
        assert f"dense.layers[1].{field}'" in str(e.value) and want in str(e.value)


def test_a_feature_reads_one_table_and_a_table_may_have_several():
    text = DATA_DIR.joinpath("models", "dlrm-small.toml").read_text()
    names = [[f"f{i}"] for i in range(8)]
    several = [["f0", "g0"]] + names[1:]
    # two features on c0: the dot interaction then takes 9 + 1 vectors, its output 10 x 9 / 2 + 64 wide
    fixed = text.replace("features = 9 ", "features = 10 ").replace("input = 100 ", "input = 109 ")
    model = parse_model(tomllib.loads(fixed.replace("[embeddings]", f"[embeddings]\nfeatures = {several}")), "s.toml")
    assert model.tables.feature_names[0] == ("f0", "g0")
    shared = [["f0"], ["f0"]] + names[2:]
    with pytest.raises(pm.ConfigError) as e:
        parse_model(tomllib.loads(text.replace("[embeddings]", f"[embeddings]\nfeatures = {shared}")), "s.toml")
    assert "embeddings.features[1]'" in str(e.value) and "'f0'" in str(e.value) and "table 0" in str(e.value)
