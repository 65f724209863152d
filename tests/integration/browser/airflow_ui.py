"""Page helpers for Airflow 3.3's React UI, driven by Playwright's sync API in a real Chromium.

Selectors prefer what a person sees (roles, labels, text) and fall back to the UI's own ``data-testid`` hooks where it
shows state only as an icon or colour. What was found, and why each selector is what it is: docs/testing.md
("The Airflow UI in a real browser"). States are returned as Airflow's state names ("success", "upstream_failed"),
or None for "No Status".
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from playwright.sync_api import Frame, Locator, Page, Response
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

MONACO = ".monaco-editor"  # the JSON editor (help texts hold <code> too, so not by the "code" role)
DEFAULT_SECTION = "Run Parameters"  # the trigger form's section of params without a ``section``
FINISHED = ("success", "failed")


def ui_state(text: str) -> str | None:
    """The UI's state label ("Upstream Failed", "No Status") as Airflow's state name (upstream_failed, None)."""
    name = text.strip().lower().replace(" ", "_")
    return None if name in ("", "no_status", "none") else name


def run_path(dag_id: str, run_id: str) -> str:
    return f"/dags/{dag_id}/runs/{quote(run_id, safe=':+')}"


def task_path(dag_id: str, run_id: str, task_id: str, map_index: int | None = None) -> str:
    suffix = "" if map_index is None else f"/mapped/{map_index}"
    return f"{run_path(dag_id, run_id)}/tasks/{task_id}{suffix}"


@dataclass(frozen=True)
class UiTaskInstance:
    """One row of a task-instance table as the UI renders it."""

    task_id: str  # empty in a mapped task's own list, which has no task column
    map_index: int | None  # None for an unmapped task
    map_label: str  # the rendered map index ("frames 0-7"), empty for an unmapped task
    state: str | None
    try_number: int


class TriggerForm:
    """The "Trigger Dag" dialog: its Params form (one field per top-level Param, grouped into collapsible sections of
    which one is open at a time), Advanced Options (run id, conf JSON) and the Trigger button."""

    def __init__(self, ui: AirflowUI, dag_id: str, dialog: Locator) -> None:
        self.ui = ui
        self.page = ui.page
        self.dag_id = dag_id
        self.dialog = dialog

    # Sections and fields

    def sections(self) -> list[str]:
        """Section names in order ("Run Parameters", ..., "Advanced Options")."""
        return [name.strip() for name in self.dialog.locator("button[aria-expanded]").all_inner_texts()]

    def expanded_sections(self) -> list[str]:
        """The sections shown open."""
        buttons = self.dialog.locator('button[aria-expanded="true"]')
        return [name.strip() for name in buttons.all_inner_texts()]

    def labels(self, section: str) -> list[str]:
        """The field labels of a section in order, as shown ("Target video *" for a required one); opens it."""
        region = self.open_section(section)
        labels = region.get_by_role("group").locator('label[data-scope="field"]')  # not a switch's own <label>
        return [" ".join(text.split()) for text in labels.all_inner_texts()]

    def dropdown_options(self, group: Locator) -> list[str]:
        """The shown options of a field's dropdown (opened, read, closed again)."""
        group.get_by_role("combobox").click()
        options = self.page.get_by_role("option")
        options.first.wait_for()
        shown = [text.strip() for text in options.all_inner_texts()]
        group.locator("label").click()  # the menu closes on blur (Escape would close the whole dialog)
        options.first.wait_for(state="detached")
        return shown

    def open_section(self, name: str) -> Locator:
        """Expand the section (closing the one open before) and return its region."""
        button = self.dialog.get_by_role("button", name=name, exact=True)
        if button.get_attribute("aria-expanded") != "true":
            button.click()
        # By the id the button controls: a section name with spaces breaks the region's aria-labelledby (an id list).
        region = self.dialog.locator(f'[id="{button.get_attribute("aria-controls")}"]')
        region.wait_for()
        return region

    def field(self, label: str, section: str | None = None) -> Locator:
        """The field group whose label is ``label`` (the Param's title), in ``section``, or searched in every section
        when None. Its section is left open."""
        label_pattern = re.compile(rf"^\s*{re.escape(label)}\s*\*?\s*$")  # required fields end with " *"
        for name in [section] if section else self.sections():
            group = (
                self.open_section(name)
                .get_by_role("group")
                .filter(has=self.page.locator("label", has_text=label_pattern))
            )
            if group.count():
                return group.first
        raise AssertionError(f"no field labelled {label!r} in {section or self.sections()}")

    def fill(self, label: str, value: Any, section: str | None = None) -> None:
        """Set a field the way its type renders it: text and number inputs, a list as one line per item, a dropdown
        by its shown text (a multi-select by a list of them, ``[]`` for none), a switch by bool, an object or a list
        of numbers as JSON in the code editor."""
        group = self.field(label, section)
        if group.locator(MONACO).count():
            self._fill_code(group, value if isinstance(value, str) else json.dumps(value))
        elif group.get_by_role("combobox").count():
            self._choose(group, [value] if isinstance(value, str) else list(value))
        elif group.locator("input[type=checkbox]").count():
            self._switch(group, bool(value))
        elif group.locator("textarea").count():
            lines = value if isinstance(value, str) else "\n".join(str(item) for item in value)
            group.locator("textarea").fill(lines)
        else:
            group.locator("input").first.fill(str(value))
            group.locator("input").first.press("Tab")  # a number field commits (and clamps to its range) on blur

    def fill_fields(self, values: Mapping[str, Any], section: str | None = None) -> None:
        for label, value in values.items():
            self.fill(label, value, section)

    def _fill_code(self, group: Locator, text: str) -> None:
        """The Monaco editor: select all, insert (no per-key auto-closing), then drop what auto-closing added after it."""
        group.locator(MONACO).click()
        keyboard = self.page.keyboard
        keyboard.press("Control+A")
        keyboard.insert_text(text)
        keyboard.press("Shift+Control+End")
        keyboard.press("Delete")

    def _choose(self, group: Locator, shown: Sequence[str]) -> None:
        """A dropdown by its shown text; a multi-select is emptied first (each chip's "Remove ..." button), so ``[]``
        leaves none selected."""
        removes = group.locator('[aria-label^="Remove "] [role="button"]')
        while removes.count():
            removes.first.click()
        for text in shown:
            group.get_by_role("combobox").click()
            self.page.get_by_role("option", name=text, exact=True).click()

    def _switch(self, group: Locator, on: bool) -> None:
        # The checkbox itself is hidden behind the switch's track: click the track.
        if group.locator("input[type=checkbox]").is_checked() != on:
            group.locator('[data-scope="switch"][data-part="control"]').click()

    def set_run_id(self, run_id: str) -> None:
        self.open_section("Advanced Options").get_by_label("Run ID").fill(run_id)

    def overlapped_help(self, section: str) -> list[str]:
        """The labels of the section's fields whose help text has a line drawn over another (two of its boxes, text
        or inline elements with their padding, overlap without one holding the other), as the browser lays it out
        now; opens it."""
        helps = self.open_section(section).locator('[data-part="helper-text"]')
        assert helps.count(), f"no help texts in {section}"
        return list(helps.evaluate_all(_OVERLAPPED_HELP_JS))

    # Errors and submit

    def field_errors(self) -> dict[str, str]:
        """``{field label: its error}`` for the fields of the open section that show one ("This field is required")."""
        errors = {}
        for group in self.dialog.get_by_role("group").filter(has=self.page.locator('[data-part="error-text"]')).all():
            label = group.locator("label").first.inner_text().strip().removesuffix("*").strip()
            errors[label] = group.locator('[data-part="error-text"]').first.inner_text().strip()
        return errors

    def error_alert(self) -> str | None:
        """The error the API returned for the last submit, as the dialog shows it ("400 Bad Request ..."); None when
        there is none."""
        alert = self.dialog.get_by_test_id("error-alert")
        return alert.inner_text().strip() if alert.count() and alert.is_visible() else None

    def submit_button(self) -> Locator:
        return self.dialog.get_by_role("button", name="Trigger", exact=True)

    def can_submit(self) -> bool:
        """Whether the Trigger button is enabled (the form disables it while a field is invalid)."""
        return self.submit_button().is_enabled()

    def submit(self, timeout: float = 30) -> str:
        """Trigger, wait for the UI to open the new run, and return its run id; an AssertionError with the dialog's
        error when the API refused the run."""
        self.submit_button().click()
        deadline = time.monotonic() + timeout
        pattern = re.compile(rf"/dags/{re.escape(self.dag_id)}/runs/([^/?#]+)")
        while time.monotonic() < deadline:
            if match := pattern.search(self.page.url):
                return unquote(match.group(1))
            if error := self.error_alert():
                raise AssertionError(f"the trigger form refused the run: {error}")
            time.sleep(0.2)
        raise AssertionError(f"no run page after submitting the form (at {self.page.url})")

    def submit_expecting_error(self, timeout: float = 30) -> str:
        """Trigger and return the error the dialog shows for this answer of the API (the run must not start).
        Dispatched to the button: the toast of an earlier refusal may lie over it."""
        before = self.error_alert()
        with self.page.expect_response(_is_trigger_request, timeout=timeout * 1000) as response:
            self.submit_button().dispatch_event("click")
        assert not response.value.ok, f"the run was triggered: {response.value.text()}"
        self.dialog.get_by_test_id("error-alert").wait_for(timeout=timeout * 1000)
        deadline = (
            time.monotonic() + 3
        )  # the alert is redrawn with the new answer (the same text when it did not change)
        while self.error_alert() == before and time.monotonic() < deadline:
            time.sleep(0.1)
        return str(self.error_alert())


class AirflowUI:
    """One logged-in page of the Airflow UI, with screenshots under ``artifacts``."""

    def __init__(self, page: Page, base_url: str, artifacts: Path) -> None:
        self.page = page
        self.base_url = base_url.rstrip("/")
        self.artifacts = artifacts

    def goto(self, path: str) -> None:
        self.page.goto(self.base_url + path)

    def screenshot(self, name: str) -> Path:
        """A full-page screenshot ``<artifacts>/<name>.png``."""
        self.artifacts.mkdir(parents=True, exist_ok=True)
        path = self.artifacts / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def screenshot_element(self, element: Locator, name: str, height: int = 2400) -> Path:
        """``<artifacts>/<name>.png`` of one element whole (a dialog scrolls inside the page: the viewport is made
        ``height`` tall for the shot, then restored)."""
        self.artifacts.mkdir(parents=True, exist_ok=True)
        path = self.artifacts / f"{name}.png"
        size = self.page.viewport_size or {"width": 1400, "height": 1000}
        self.page.set_viewport_size({"width": size["width"], "height": height})
        try:
            element.screenshot(path=str(path))
        finally:
            self.page.set_viewport_size(size)
        return path

    def login(self, username: str, password: str) -> None:
        """Through the real login page (the simple auth manager's)."""
        self.goto("/")
        self.page.wait_for_url(re.compile(r"/auth/login"))
        self.page.get_by_label("Username").fill(username)
        self.page.get_by_label("Password").fill(password)
        self.page.get_by_role("button", name="Sign in").click()
        self.page.wait_for_url(lambda url: "/auth/login" not in url)
        self.page.get_by_role("link", name="Dags").first.wait_for()

    # The DAG

    def open_dag(self, dag_id: str) -> None:
        self.goto(f"/dags/{dag_id}")
        self.page.get_by_role("heading", name=dag_id, exact=True).wait_for()

    def open_trigger_form(self, dag_id: str) -> TriggerForm:
        """The DAG's trigger dialog (it has no route of its own: the DAG page's Trigger button opens it)."""
        self.open_dag(dag_id)
        self.page.get_by_role("button", name="Trigger Dag").click()
        dialog = self.page.get_by_role("dialog").filter(has_text=f"Trigger Dag - {dag_id}")
        dialog.get_by_role("button", name=DEFAULT_SECTION, exact=True).wait_for()
        return TriggerForm(self, dag_id, dialog)

    def dag_failure_counts(self, dag_id: str) -> tuple[int, int]:
        """(failed tasks, failed runs) of the DAG's overview (its default range: the last 24 hours)."""
        self.open_dag(dag_id)
        counts = []
        for what in ("Failed Tasks", "Failed Runs"):
            link = self.page.get_by_role("link", name=re.compile(rf"^\d+ {what}$"))
            counts.append(int(str(link.get_attribute("aria-label") or link.inner_text()).split()[0]))
        return counts[0], counts[1]

    # A run: the grid and the task-instance table

    def open_run(self, dag_id: str, run_id: str) -> None:
        """The run's page: the grid on the left, the run's header and task instances on the right."""
        self.goto(run_path(dag_id, run_id))
        self.page.get_by_test_id("header-card").get_by_role("heading", name=run_id, exact=True).wait_for()

    def run_state(self) -> str | None:
        """The state in the open run's header."""
        return ui_state(self.page.get_by_test_id("header-card").get_by_test_id("state-badge").inner_text())

    def wait_for_run_state(
        self, dag_id: str, run_id: str, states: Sequence[str] = FINISHED, timeout: float = 240
    ) -> str | None:
        """Watch the open run's page until its header shows one of ``states``; that state. The page refreshes itself
        while the run is active; it is reloaded every 20 s in case that stalls."""
        self.open_run(dag_id, run_id)
        deadline = time.monotonic() + timeout
        reload_at = time.monotonic() + 20
        while (state := self.run_state()) not in states:
            if time.monotonic() > deadline:
                self.screenshot(f"run-still-{state}")
                raise AssertionError(f"run {run_id} still {state} after {timeout} s")
            if time.monotonic() > reload_at:
                self.open_run(dag_id, run_id)
                reload_at = time.monotonic() + 20
            time.sleep(1)
        return state

    def wait_for_text(self, text: str | re.Pattern[str], timeout: float = 20) -> Locator:
        """The first element of the open page that shows ``text`` (a substring, or a pattern), once it is visible."""
        element = self.page.get_by_text(text).first
        element.wait_for(timeout=timeout * 1000)
        return element

    def output_tab(self, dag_id: str, run_id: str) -> Any:
        """The run page's "Output" tab (the provider's external view), opened; its frame."""
        self.open_run(dag_id, run_id)
        self.page.get_by_role("link", name="Output", exact=True).click()
        frame = self.page.frame_locator('iframe[title="Output"]')
        frame.locator("#progress").wait_for()
        return frame

    def output_frame(self) -> Frame:
        """The open Output tab's frame itself (a frame locator cannot follow the frame's own navigation)."""
        frame = self.page.locator('iframe[title="Output"]').element_handle().content_frame()
        assert frame is not None, "no Output tab open"
        return frame

    def grid_states(self, run_id: str) -> dict[str, str | None]:
        """``{task_id: state}`` from the open run's grid column: each cell shows its state as an icon, so its tooltip
        ("Task ID: ... State: Success ...") is read. A mapped task's cell summarises all its map indexes."""
        prefix = f"grid-{run_id}-"
        cells = self.page.locator(f'[data-testid^="{prefix}"]')
        cells.first.wait_for()
        states = {}
        for cell in cells.all():
            task_id = str(cell.get_attribute("data-testid"))[len(prefix) :]
            cell.hover()
            tooltip = self.page.get_by_role("tooltip").filter(has_text=f"Task ID: {task_id}")
            match = re.search(r"State:\s*([^\n]+)", tooltip.inner_text())
            states[task_id] = ui_state(match.group(1)) if match else None
            self.page.mouse.move(0, 0)  # let the tooltip close before the next cell's opens
        return states

    def task_instances(self) -> list[UiTaskInstance]:
        """The rows of the open page's task-instance table (a run's, or a mapped task's list), once it shows as many
        rows as its "N Task Instances" heading says (rows arrive after the heading). One page of rows: keep runs small."""
        heading = self.page.get_by_role("heading", name=re.compile(r"^\d+ Task Instances?$"))
        expected = int(heading.inner_text().split()[0])
        rows = self.page.get_by_role("table").first.get_by_role("rowgroup").nth(1).get_by_role("row")
        _wait_for(lambda: rows.count() >= expected, f"{expected} task-instance rows, {rows.count()} shown")
        return [_task_instance_row(row) for row in rows.all()]

    def mapped_task_instances(self, dag_id: str, run_id: str, task_id: str) -> dict[int, UiTaskInstance]:
        """``{map_index: row}`` from the mapped task's list (``.../tasks/<task>/mapped``)."""
        self.goto(f"{task_path(dag_id, run_id, task_id)}/mapped")
        return {row.map_index: row for row in self.task_instances() if row.map_index is not None}

    # A task instance

    def open_task_instance(self, dag_id: str, run_id: str, task_id: str, map_index: int | None = None) -> None:
        self.goto(task_path(dag_id, run_id, task_id, map_index))
        self.page.get_by_role("heading", name=re.compile(rf"^{re.escape(task_id)}\b")).first.wait_for()

    def extra_links(
        self, dag_id: str, run_id: str, task_id: str, map_index: int | None = None, names: Sequence[str] = ()
    ) -> dict[str, str]:
        """``{name: href}`` of the task instance's extra links as its Details tab shows them, once ``names`` are there
        (Airflow's UI shows only http(s), mailto and same-origin links; a link without a URL is not shown)."""
        self.goto(task_path(dag_id, run_id, task_id, map_index) + "/details")
        heading = self.page.get_by_role("heading", name="Extra Links", exact=True)
        heading.wait_for()
        links = heading.locator("xpath=..").get_by_role("link")

        def shown() -> dict[str, str]:
            return {link.inner_text().strip(): str(link.get_attribute("href")) for link in links.all()}

        _wait_for(lambda: set(names) <= set(shown()), f"extra links {list(names)}, shown {list(shown())}")
        return shown()

    def extra_link(self, dag_id: str, run_id: str, task_id: str, name: str, map_index: int | None = None) -> Locator:
        """The task instance's extra link ``name`` on its Details tab, to click (a same-origin link opens in the page
        itself: Airflow's UI gives it ``target="_self"``)."""
        self.extra_links(dag_id, run_id, task_id, map_index, names=(name,))
        heading = self.page.get_by_role("heading", name="Extra Links", exact=True)
        return heading.locator("xpath=..").get_by_role("link", name=name, exact=True)

    def download_by_click(self, link: Locator, timeout: float = 30) -> bytes:
        """Click a link as a person does and return the bytes the browser saved (the click must start a download)."""
        with self.page.expect_download(timeout=timeout * 1000) as download:
            link.click()
        return Path(download.value.path()).read_bytes()

    def answer_to_click(self, link: Locator, url_part: str, timeout: float = 30) -> Response:
        """Click a link that opens in the page and return the answer of the first request whose URL holds
        ``url_part``."""
        with self.page.expect_response(lambda response: url_part in response.url, timeout=timeout * 1000) as answer:
            link.click()
        return answer.value

    def clear_task_instance(
        self, dag_id: str, run_id: str, task_id: str, map_index: int | None = None, *, downstream: bool = True
    ) -> list[tuple[str, int]]:
        """Clear one task instance with its panel's Clear button: only it (and, with ``downstream``, the tasks after
        it, which the dialog preselects), never the task's other map indexes. Returns the affected ``(task_id,
        map_index)`` the dialog listed, once the API has applied the clear."""
        self.open_task_instance(dag_id, run_id, task_id, map_index)
        self.page.get_by_role("button", name=re.compile(r"to clear$")).first.click()  # named "Press shift+c to clear"
        dialog = self.page.get_by_role("dialog").filter(has_text="Clear Task Instance")
        dialog.get_by_role("button", name=re.compile(r"^Affected Tasks: \d+")).wait_for()
        chosen = (task_id, -1 if map_index is None else map_index)
        _wait_for(lambda: chosen in _affected(dialog), f"{chosen} listed as affected")  # rows come after the count
        if not downstream and _affected(dialog) != [chosen]:
            dialog.get_by_role("button", name="Downstream", exact=True).click()
            _wait_for(lambda: _affected(dialog) == [chosen], f"only {chosen} affected, not {_affected(dialog)}")
        affected = _affected(dialog)
        others = [row for row in affected if row != chosen]
        assert chosen in affected and all(other_task != task_id for other_task, _ in others), affected
        # The dialog closes before its request is answered: wait for the real (not dry-run) clear's response.
        with self.page.expect_response(_is_clear_request) as response:
            dialog.get_by_role("button", name="Confirm").click()
        assert response.value.ok, f"clearing {chosen}: {response.value.status} {response.value.text()}"
        dialog.wait_for(state="hidden")
        return affected


_OVERLAPPED_HELP_JS = """helps => helps.filter(help => {
  const boxes = [];
  const walker = document.createTreeWalker(help, NodeFilter.SHOW_TEXT);
  for (let text = walker.nextNode(); text; text = walker.nextNode()) {
    const range = document.createRange();
    range.selectNodeContents(text);
    boxes.push(...range.getClientRects());
  }
  for (const element of help.querySelectorAll("*")) {  // inline boxes: their padding and background too (a chip)
    if (getComputedStyle(element).display.startsWith("inline")) boxes.push(...element.getClientRects());
  }
  const shown = boxes.filter(box => box.width > 0 && box.height > 0);
  const holds = (a, b) => a.left <= b.left && a.right >= b.right && a.top <= b.top && a.bottom >= b.bottom;
  return shown.some((a, i) => shown.slice(i + 1).some(b =>
    a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1
    && !holds(a, b) && !holds(b, a)));
}).map(help => help.closest('[role="group"]').querySelector('label').innerText.trim())"""


def _task_instance_row(row: Locator) -> UiTaskInstance:
    """One row of a task-instance table, read by its cells' test ids; a mapped row's label links to its map index."""

    def cell(column: str) -> Locator:
        return row.get_by_test_id(f"table-cell-{column}")

    def text(column: str) -> str:
        return cell(column).inner_text().strip() if cell(column).count() else ""

    label_link = cell("rendered_map_index").get_by_role("link")
    href = label_link.first.get_attribute("href") if label_link.count() else None
    match = re.search(r"/mapped/(\d+)", href or "")
    return UiTaskInstance(
        task_id=text("task_display_name"),
        map_index=int(match.group(1)) if match else None,
        map_label=text("rendered_map_index"),
        state=ui_state(text("state")),
        try_number=int(text("try_number") or 0),
    )


def _affected(dialog: Locator) -> list[tuple[str, int]]:
    """The clear dialog's affected task instances (its table: checkbox, Task ID, State, Map Index, Run ID)."""
    rows = dialog.get_by_role("region").get_by_role("row").all()[1:]
    cells = [row.get_by_role("cell").all_inner_texts() for row in rows]
    return sorted((texts[1].strip(), int(texts[3])) for texts in cells)


def _is_trigger_request(response: Response) -> bool:
    return response.request.method == "POST" and response.request.url.endswith("/dagRuns")


def _is_clear_request(response: Response) -> bool:
    request = response.request
    if request.method != "POST" or not request.url.endswith("/clearTaskInstances"):
        return False
    return (request.post_data_json or {}).get("dry_run") is False


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise PlaywrightTimeoutError(f"timed out waiting: {what}")
        time.sleep(0.2)
