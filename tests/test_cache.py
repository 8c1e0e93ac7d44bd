import jax

import perfmodel as pm


def test_compile_cache_folder_and_off_switch(tmp_path, monkeypatch):
    """The folder given wins; PERFMODEL_CACHE_DIR names the default one, and empty turns it off."""
    before = jax.config.jax_compilation_cache_dir
    try:
        assert pm.enable_compile_cache(str(tmp_path)) == str(tmp_path)
        assert jax.config.jax_compilation_cache_dir == str(tmp_path)
        jax.config.update("jax_compilation_cache_dir", None)
        monkeypatch.setenv("PERFMODEL_CACHE_DIR", "")
        assert pm.enable_compile_cache() is None
        assert jax.config.jax_compilation_cache_dir is None
        monkeypatch.setenv("PERFMODEL_CACHE_DIR", str(tmp_path / "env"))
        assert pm.enable_compile_cache() == str(tmp_path / "env")
    finally:
        jax.config.update("jax_compilation_cache_dir", before)
