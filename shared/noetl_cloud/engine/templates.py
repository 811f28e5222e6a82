"""Template rendering for DSL v2 (dsl-v2-spec §3.6): sandboxed Jinja2 with native types.

* A string that is exactly one ``{{ expr }}`` keeps the type of ``expr`` (an int stays an int, a list a list).
  Any other string containing ``{{`` or ``{%`` renders to text. Strings without template markers are
  returned unchanged (no parse).
* Mappings and lists are rendered recursively; keys are not rendered.
* Undefined names are errors (``{{ missing }}`` fails), but attribute chains on an undefined value stay
  undefined so ``{{ outcome.result.data.paging.page | default(1) }}`` works.
* Bare names are looked up args → ctx → iter → workload (§3.6); the namespaces themselves (``args``, ``ctx``,
  ``iter``, ``workload``, ``outcome``, ``event``, ``_prev``, ``_task``, ``_attempt``) always win over bare names.

Every failure is a :class:`TemplateFailure` naming the expression, the step and the task.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from jinja2 import ChainableUndefined, StrictUndefined, TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from markupsafe import Markup

from noetl_cloud.errors import NoetlError

_EXACT = re.compile(r"^\s*\{\{(?P<expr>.*?)\}\}\s*$", re.DOTALL)
#: Namespaces a template may see; bare names never shadow these.
NAMESPACES = ("workload", "ctx", "iter", "args", "outcome", "event", "_prev", "_task", "_attempt")
#: Bare-name read order, lowest precedence first (§3.6: args → ctx → iter → workload).
_BARE_ORDER = ("workload", "iter", "ctx", "args")


class TemplateFailure(NoetlError):
    """A template could not be rendered; the task (or routing) that needed it fails with this error."""

    status = 422
    code = "template_failed"

    def __init__(self, reason: str, *, expression: str, step: str | None = None, task: str | None = None) -> None:
        where = f"step '{step}'" if step else "playbook"
        if task:
            where += f", task '{task}'"
        super().__init__(
            f"template error in {where}: {reason} (expression: {expression})",
            details={"expression": expression, "step": step, "task": task, "reason": reason},
        )
        self.expression = expression
        self.step = step
        self.task = task
        self.reason = reason


class _Undefined(ChainableUndefined, StrictUndefined):
    """Undefined that allows ``a.b.c | default(x)`` but fails when printed, compared or tested."""

    __slots__ = ()


class _Environment(ImmutableSandboxedEnvironment):
    """Sandboxed and immutable (a template cannot change a list or a mapping it reads: the scopes it sees,
    ``workload`` above all, are shared, not copied); ``a.b`` on a mapping reads the key first, so
    ``workload.items`` is data, not ``dict.items``."""

    def getattr(self, obj: Any, attribute: str) -> Any:
        if isinstance(obj, Mapping):
            try:
                return obj[attribute]
            except (KeyError, TypeError):
                pass
        return super().getattr(obj, attribute)


def _environment() -> ImmutableSandboxedEnvironment:
    return _Environment(undefined=_Undefined, autoescape=False, keep_trailing_newline=True)


def is_template(value: str) -> bool:
    """Whether ``value`` holds template markers at all."""
    return "{{" in value or "{%" in value


def build_scope(
    *,
    workload: Mapping[str, Any] | None = None,
    ctx: Mapping[str, Any] | None = None,
    iter_scope: Mapping[str, Any] | None = None,
    args: Mapping[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The variables a template sees: the namespaces plus bare names in §3.6 precedence.

    ``extra`` adds further namespaces (``outcome``, ``event``, ``_prev``, ``_task``, ``_attempt``);
    ``iter`` is present only when ``iter_scope`` is given.
    """
    layers: dict[str, Mapping[str, Any] | None] = {
        "workload": workload,
        "iter": iter_scope,
        "ctx": ctx,
        "args": args,
    }
    scope: dict[str, Any] = {}
    for name in _BARE_ORDER:
        layer = layers[name]
        if layer:
            scope.update({key: value for key, value in layer.items() if isinstance(key, str)})
    scope["workload"] = workload if workload is not None else {}
    scope["ctx"] = ctx if ctx is not None else {}
    scope["args"] = args if args is not None else {}
    if iter_scope is not None:
        scope["iter"] = iter_scope
    scope.update(extra)
    return scope


class Renderer:
    """Renders values against a scope. One instance per engine; compiled templates are cached."""

    def __init__(self) -> None:
        self._env = _environment()
        self._cache: dict[str, Any] = {}

    def render(self, value: Any, scope: Mapping[str, Any], *, step: str | None = None, task: str | None = None) -> Any:
        """Render ``value`` (a string, mapping, list or scalar) recursively against ``scope``."""
        if isinstance(value, str):
            return self._render_text(value, scope, step, task)
        if isinstance(value, Mapping):
            return {key: self.render(item, scope, step=step, task=task) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self.render(item, scope, step=step, task=task) for item in value]
        return value

    def truth(
        self, condition: Any, scope: Mapping[str, Any], *, step: str | None = None, task: str | None = None
    ) -> bool:
        """Evaluate a ``when`` guard: ``None`` means true; a template is rendered and read as a boolean.

        A rendered string is true unless it is empty or reads ``false``/``0``/``none``/``no`` (any case).
        """
        if condition is None:
            return True
        value = self.render(condition, scope, step=step, task=task)
        if isinstance(value, str):
            return value.strip().lower() not in ("", "false", "0", "none", "no", "null")
        return bool(value)

    def _render_text(self, text: str, scope: Mapping[str, Any], step: str | None, task: str | None) -> Any:
        if not is_template(text):
            return text
        exact = _EXACT.match(text)
        try:
            if exact and "{{" not in exact["expr"] and "{%" not in text:
                result = self._compiled_expression(exact["expr"])(**scope)
                if isinstance(result, _Undefined):
                    # Reading it as text raises the UndefinedError that names what is missing.
                    str(result)
                return str(result) if isinstance(result, Markup) else result
            return self._compiled_template(text).render(**scope)
        except TemplateError as exc:
            raise TemplateFailure(exc.message or type(exc).__name__, expression=text, step=step, task=task) from None
        except (TypeError, ValueError, ArithmeticError, LookupError, AttributeError) as exc:
            raise TemplateFailure(f"{type(exc).__name__}: {exc}", expression=text, step=step, task=task) from None

    def _compiled_expression(self, expr: str) -> Any:
        key = "expr:" + expr
        if key not in self._cache:
            self._cache[key] = self._env.compile_expression(expr.strip(), undefined_to_none=False)
        return self._cache[key]

    def _compiled_template(self, text: str) -> Any:
        key = "tmpl:" + text
        if key not in self._cache:
            self._cache[key] = self._env.from_string(text)
        return self._cache[key]
