"""Stand-in for flag-gems 5.0.2's LibTuner (see ../../README.md)."""

import json
import os

import triton


def _db():
    path = os.environ.get("FAKE_FLAGGEMS_DB")
    if not path or not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def _db_put(table, key, value):
    path = os.environ.get("FAKE_FLAGGEMS_DB")
    if not path:
        return
    db = _db()
    db.setdefault(table, {})[key] = value
    with open(path, "w") as f:
        json.dump(db, f)


class ConfigCache:
    """flag-gems' persistent key -> best config table (SQLite there)."""

    def __init__(self, table, configs):
        self.table, self.configs = table, configs

    def _find(self, kwargs):
        for c in self.configs:
            if c.all_kwargs() == kwargs:
                return c
        return triton.Config(kwargs)

    def __contains__(self, key):
        return repr(key) in _db().get(self.table, {})

    def __getitem__(self, key):
        return self._find(_db()[self.table][repr(key)])

    def __setitem__(self, key, config):
        _db_put(self.table, repr(key), config.all_kwargs())


class BenchmarkCache:
    """flag-gems' persistent (key, config) -> timings table."""

    def __init__(self, table, key):
        self.table = table + "|" + repr(key)

    def get(self, config):
        return _db().get(self.table, {}).get(repr(sorted(config.all_kwargs().items())))

    def __setitem__(self, config, timings):
        _db_put(self.table, repr(sorted(config.all_kwargs().items())), list(timings))


class LibTuner(triton.runtime.Autotuner):
    def __init__(self, fn, arg_names, configs, key, reset_to_zero, restore_value, pre_hook=None,
                 post_hook=None, prune_configs_by=None, warmup=None, rep=None, use_cuda_graph=False,
                 do_bench=None, strategy=None):
        super().__init__(fn, arg_names, configs, key, reset_to_zero, restore_value, pre_hook, post_hook,
                         prune_configs_by, warmup, rep, use_cuda_graph, do_bench)
        self.__name__ = self.base_fn.__name__
        self.keys = key
        self.config_table_name = f"{self.__name__}_config"
        self.benchmark_table_name = f"{self.__name__}_benchmark"
        self.cache = ConfigCache(self.config_table_name, self.configs)

    def get_key(self, args):
        key = tuple(args[k] for k in self.keys if k in args)
        key += tuple(str(arg.dtype) for arg in args.values() if hasattr(arg, "dtype"))
        return key

    @staticmethod
    def policy(bench_fn, configs, args, kwargs):
        timings = {config: bench_fn(config) for config in configs}
        best_config = min(timings, key=timings.get)
        return best_config, timings

    def run(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args))
        if len(self.configs) > 1:
            all_args = {**self.nargs, **kwargs}
            _args = {k: v for k, v in all_args.items() if k in self.arg_names}
            key = self.get_key(_args)
            if key not in self.cache:
                cache = BenchmarkCache(self.benchmark_table_name, key)
                pruned_configs = self.prune_configs(kwargs)

                def bench(config):
                    ret = cache.get(config)
                    if ret is None:
                        ret = self._bench(*args, config=config, **kwargs)
                        cache[config] = tuple(ret)
                    return list(ret)

                best_config, timings = self.policy(bench, pruned_configs, args, kwargs)
                self.cache[key] = best_config
                full_nargs = {**self.nargs, **kwargs, **self.cache[key].all_kwargs()}
                self.pre_hook(full_nargs, reset_only=True)
                self.configs_timings = timings
            config = self.cache[key]
            if config.pre_hook is None:
                cached_kwargs = config.all_kwargs()
                for original_config in self.configs:
                    if original_config.all_kwargs() == cached_kwargs:
                        config = original_config
                        break
        else:
            config = self.configs[0]
        self.best_config = config
        if config.pre_hook is not None:
            full_nargs = {**self.nargs, **kwargs, **config.all_kwargs()}
            config.pre_hook(full_nargs)
        ret = self.fn.run(*args, **kwargs, **config.all_kwargs())
        self.nargs = None
        return ret


def libtuner(configs, key, prune_configs_by=None, restore_value=(), reset_to_zero=(), do_bench=None):
    def decorator(fn):
        return LibTuner(fn, fn.arg_names, configs, key, reset_to_zero, restore_value,
                        prune_configs_by=prune_configs_by, do_bench=do_bench)

    return decorator
