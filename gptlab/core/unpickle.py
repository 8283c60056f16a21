"""Unpickling with an allow-list of globals: pickle.load calls whatever function or class a pickle names (os.system,
eval, a wrapper whose __reduce__ runs code and then returns the genuine object), so a file from someone else is read
here with only the globals its format needs, each given as the object to use in its place."""
import io
import pickle


class RefusedGlobal(pickle.UnpicklingError):
    """The pickle names a global outside the allow-list: loading it could run code."""

    def __init__(self, module, name):
        self.global_name = f"{module}.{name}"
        super().__init__(f"names {self.global_name}")


class _AllowListUnpickler(pickle.Unpickler):
    def __init__(self, file, allowed):
        super().__init__(file)
        self._allowed = allowed

    def find_class(self, module, name):  # every GLOBAL, STACK_GLOBAL and EXT opcode comes here
        try:
            return self._allowed[module, name]
        except (KeyError, TypeError):
            raise RefusedGlobal(module, name) from None


def load_allowed(data, allowed):
    """Unpickle `data` (bytes) whose globals are all keys of `allowed` ({(module, name): object}); any other global
    is a RefusedGlobal before anything is called. Persistent ids are refused too (pickle's default)."""
    return _AllowListUnpickler(io.BytesIO(data), allowed).load()
