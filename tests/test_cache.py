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


def test_kept_marks_live_in_the_cache_folder_per_program(tmp_path, monkeypatch):
    """mark_kept notes a program in the cache folder: is_kept finds it there, not under another
    name, not in another folder, not for another source of perfmodel (the program it compiles
    differs), and nowhere with the cache off (nothing is written then)."""
    from perfmodel import cache
    from perfmodel.cache import is_kept, mark_kept

    assert len(cache._source_digest()) == 16 and cache._source_digest() == cache._source_digest()

    before = jax.config.jax_compilation_cache_dir
    try:
        jax.config.update("jax_compilation_cache_dir", str(tmp_path / "a"))
        assert not is_kept("relaxed step X")
        mark_kept("relaxed step X")
        assert is_kept("relaxed step X") and not is_kept("relaxed step Y")
        with monkeypatch.context() as m:
            m.setattr(cache, "_source_digest", lambda: "edited-source")
            assert not is_kept("relaxed step X")
        jax.config.update("jax_compilation_cache_dir", str(tmp_path / "b"))
        assert not is_kept("relaxed step X")
        jax.config.update("jax_compilation_cache_dir", None)
        mark_kept("relaxed step X")
        assert not is_kept("relaxed step X") and not (tmp_path / "b").exists()
    finally:
        jax.config.update("jax_compilation_cache_dir", before)
