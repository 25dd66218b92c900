"""The tray as a StatusNotifierItem, its menu exported over com.canonical.dbusmenu: a
pystray backend in pure Python over D-Bus (jeepney), so a plain install has the menu on
any panel that hosts StatusNotifierItems (KDE, GNOME with the AppIndicator extension,
Xfce, Cinnamon, MATE, LXQt...), without GTK.

The icon is a pystray ``Icon``: ``run_tray`` drives it like the other backends, and the
menu is pystray's, built by ``menu.build_menu``, walked into dbusmenu items here. D-Bus
calls are answered on the thread that runs the icon (the main thread), where menu actions
run as on the other backends; changes from the polling thread are sent as signals.

Imported only by ``backends.load_backend``, once pystray itself is imported safely.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import threading
from collections.abc import Callable, Iterable
from typing import Any

from jeepney import (
    DBusAddress,
    HeaderFields,
    MatchRule,
    Message,
    MessageFlag,
    MessageType,
    new_error,
    new_method_call,
    new_method_return,
    new_signal,
)
from jeepney.bus_messages import message_bus
from jeepney.io.threading import DBusRouter, open_dbus_connection
from PIL import Image
from pystray._base import Icon as BaseIcon
from pystray._base import Menu

from ocrwatch.hooks.notify import session_bus

log = logging.getLogger(__name__)

WATCHER = "org.kde.StatusNotifierWatcher"
ITEM = "org.kde.StatusNotifierItem"
MENU = "com.canonical.dbusmenu"
PROPS = "org.freedesktop.DBus.Properties"
INTROSPECT = "org.freedesktop.DBus.Introspectable"
ITEM_PATH = "/StatusNotifierItem"
MENU_PATH = "/MenuBar"
SIZES = (22, 32, 64)  # hosts pick the pixmap nearest their size
TIMEOUT = 5.0
_names = itertools.count(1)

Variant = tuple[str, Any]
Props = dict[str, Variant]


def pixmaps(image: Image.Image, sizes: Iterable[int] = SIZES) -> list[tuple[int, int, bytes]]:
    """``IconPixmap``: the picture at each size as ARGB32 in network byte order."""
    out = []
    for size in sizes:
        r, g, b, a = image.convert("RGBA").resize((size, size),
                                                  Image.Resampling.LANCZOS).split()
        out.append((size, size, Image.merge("RGBA", (a, r, g, b)).tobytes()))
    return out


class Node:
    """One dbusmenu item: its id, properties and children, and the pystray item it runs."""

    def __init__(self, ident: int, props: Props, item: Any = None) -> None:
        self.id, self.props, self.item = ident, props, item
        self.children: list[Node] = []

    def shape(self) -> tuple[Any, ...]:
        """What the layout's structure is: ids and kinds, not labels or states."""
        return (self.id, self.props.get("type"), tuple(c.shape() for c in self.children))

    def walk(self) -> Iterable[Node]:
        yield self
        for child in self.children:
            yield from child.walk()

    def struct(self, depth: int, names: list[str]) -> tuple[int, Props, list[Variant]]:
        """``(ia{sv}av)``, children to ``depth`` levels (-1: all)."""
        props = {k: v for k, v in self.props.items() if not names or k in names}
        kids = [] if depth == 0 else [("(ia{sv}av)", c.struct(depth - 1, names))
                                      for c in self.children]
        return self.id, props, kids


def layout(menu: Any) -> Node:
    """The dbusmenu tree of a pystray menu, ids numbered in order (the root is 0)."""
    ids = itertools.count(1)

    def items(parent: Node, sub: Any) -> None:
        for item in sub:  # pystray's visible items, separators tidied
            if item is Menu.SEPARATOR:
                parent.children.append(Node(next(ids), {"type": ("s", "separator")}))
                continue
            props: Props = {"label": ("s", str(item.text).replace("_", "__")),
                            "enabled": ("b", bool(item.enabled))}
            checked = item.checked
            if checked is not None:
                props["toggle-type"] = ("s", "radio" if item.radio else "checkmark")
                props["toggle-state"] = ("i", 1 if checked else 0)
            node = Node(next(ids), props, item)
            if item.submenu is not None:
                node.props["children-display"] = ("s", "submenu")
                items(node, item.submenu)
            parent.children.append(node)

    root = Node(0, {"children-display": ("s", "submenu")})
    if menu is not None:
        items(root, menu)
    return root


class Icon(BaseIcon):  # type: ignore[misc]
    """pystray's icon as a StatusNotifierItem. ``activate`` is what a left click runs
    (pystray's default item when it is None)."""

    HAS_DEFAULT_ACTION = True
    HAS_MENU = True
    HAS_MENU_RADIO = True
    HAS_NOTIFICATION = False  # notifications go through ocrwatch.hooks.notify

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.activate: Callable[[], None] | None = None
        self.bus_name = f"{ITEM}-{os.getpid()}-{next(_names)}"
        self._calls: queue.Queue[Message | None] = queue.Queue()
        self._status = "Passive"
        self._pixmaps: list[tuple[int, int, bytes]] = []
        self._menu_lock = threading.Lock()
        self._tree = layout(None)
        self._revision = 0
        self._registering: set[int] = set()
        self._registered = False
        # On the bus now, so that a failure shows where the icon is created.
        conn = open_dbus_connection(bus=session_bus() or "SESSION")
        self._router = DBusRouter(conn)
        try:
            for rule in (MatchRule(type="method_call", destination=self.bus_name),
                         MatchRule(type="method_call", destination=conn.unique_name),
                         MatchRule(type="method_return"), MatchRule(type="error"),
                         self._watcher_rule()):
                self._router.filter(rule, queue=self._calls)
            self._call(message_bus.AddMatch(self._watcher_rule()))
            owned = self._call(message_bus.RequestName(self.bus_name, 4))  # do not queue
            if owned.body != (1,):
                raise RuntimeError(f"could not own {self.bus_name} on the session bus")
        except BaseException:
            self._close()
            raise

    @staticmethod
    def _watcher_rule() -> MatchRule:
        rule = MatchRule(type="signal", sender="org.freedesktop.DBus",
                         interface="org.freedesktop.DBus", member="NameOwnerChanged")
        rule.add_arg_condition(0, WATCHER)
        return rule

    def _call(self, msg: Message) -> Message:
        reply = self._router.send_and_get_reply(msg, timeout=TIMEOUT)
        if reply.header.message_type is MessageType.error:
            raise RuntimeError(f"{reply.header.fields.get(HeaderFields.error_name)}: "
                               f"{reply.body}")
        return reply

    def _close(self) -> None:
        self._router.close()
        self._router.conn.close()

    # -- pystray's backend interface (called from any thread) ---------------------------

    def _show(self) -> None:
        self._status = "Active"
        self._emit(ITEM_PATH, ITEM, "NewStatus", "s", (self._status,))
        if not (self._registered or self._registering):
            self._register()

    def _hide(self) -> None:
        self._status = "Passive"
        self._emit(ITEM_PATH, ITEM, "NewStatus", "s", (self._status,))

    def _update_icon(self) -> None:
        self._pixmaps = pixmaps(self.icon) if self.icon else []
        self._icon_valid = True
        self._emit(ITEM_PATH, ITEM, "NewIcon")

    def _update_title(self) -> None:
        self._emit(ITEM_PATH, ITEM, "NewTitle")
        self._emit(ITEM_PATH, ITEM, "NewToolTip")

    def _update_menu(self) -> None:
        self._relayout()

    def _stop(self) -> None:
        self._calls.put(None)

    def _run(self) -> None:
        self._mark_ready()
        try:
            while (msg := self._calls.get()) is not None:
                try:
                    self._handle(msg)
                except Exception:
                    log.exception("tray: a D-Bus message could not be handled")
        finally:
            self._close()

    # -- the item's side of the protocol -------------------------------------------------

    def _register(self) -> None:
        """Ask the watcher to show the item; its answer comes to ``_run`` (never waited
        for here: a watcher may read the item's properties before it answers)."""
        msg = new_method_call(DBusAddress("/StatusNotifierWatcher", bus_name=WATCHER,
                                          interface=WATCHER),
                              "RegisterStatusNotifierItem", "s", (self.bus_name,))
        serial = next(self._router.conn.outgoing_serial)
        self._registering.add(serial)
        self._router.send(msg, serial=serial)

    def _emit(self, path: str, interface: str, name: str, signature: str | None = None,
              body: tuple[Any, ...] = ()) -> None:
        if self._router.conn.sock.fileno() < 0:  # closed: the icon has stopped
            return
        try:
            self._router.send(new_signal(DBusAddress(path, interface=interface), name,
                                         signature, body))
        except OSError as exc:
            log.debug("tray: signal %s not sent: %s", name, exc)

    def _item_props(self) -> Props:
        if not self._icon_valid and self.icon:
            self._update_icon()
        tip: tuple[str, list[Any], str, str] = ("", [], self.name, self.title)
        return {
            "Category": ("s", "ApplicationStatus"),
            "Id": ("s", self.name),
            "Title": ("s", self.title),
            "Status": ("s", self._status),
            "WindowId": ("i", 0),
            "IconName": ("s", ""),
            "IconPixmap": ("a(iiay)", self._pixmaps),
            "OverlayIconName": ("s", ""),
            "OverlayIconPixmap": ("a(iiay)", []),
            "AttentionIconName": ("s", ""),
            "AttentionIconPixmap": ("a(iiay)", []),
            "AttentionMovieName": ("s", ""),
            "ToolTip": ("(sa(iiay)ss)", tip),
            "ItemIsMenu": ("b", False),  # a left click is Activate, the menu is a right click
            "Menu": ("o", MENU_PATH),
            "IconThemePath": ("s", ""),
        }

    def _menu_props(self) -> Props:
        return {"Version": ("u", 3), "TextDirection": ("s", "ltr"),
                "Status": ("s", "normal"), "IconThemePath": ("as", [])}

    def _relayout(self) -> bool:
        """Walk the menu again; tell hosts what changed. True when something did."""
        with self._menu_lock:
            old, new = self._tree, layout(self.menu)
            if new.shape() == old.shape():
                before = {n.id: n.props for n in old.walk()}
                changed = [(n.id, n.props) for n in new.walk() if before[n.id] != n.props]
                self._tree = new
                if not changed:
                    return False
                self._revision += 1
                self._emit(MENU_PATH, MENU, "ItemsPropertiesUpdated", "a(ia{sv})a(ias)",
                           (changed, []))
            else:
                self._tree = new
                self._revision += 1
            self._emit(MENU_PATH, MENU, "LayoutUpdated", "ui", (self._revision, 0))
            return True

    def _node(self, ident: int) -> Node | None:
        return next((n for n in self._tree.walk() if n.id == ident), None)

    def _event(self, ident: int, kind: str) -> bool:
        node = self._node(ident)
        if node is None:
            return False
        if (kind == "clicked" and node.item is not None and node.item.submenu is None
                and node.item.enabled):
            try:
                node.item(self)  # pystray's item: its action, when enabled
            finally:
                self.update_menu()
        return True

    def _activate(self) -> None:
        try:
            if self.activate is not None:
                self.activate()
            else:
                self()  # pystray's default item
        except Exception:
            log.exception("tray: the click on the icon failed")
        finally:
            self.update_menu()

    def _handle(self, msg: Message) -> None:
        fields, kind = msg.header.fields, msg.header.message_type
        if kind is MessageType.signal:  # the watcher's name changed hands
            self._registered = False
            if msg.body[2] and self.visible:
                log.info("tray: a StatusNotifierWatcher is on the bus again; "
                         "showing the icon there")
                self._register()
            return
        if kind in (MessageType.method_return, MessageType.error):
            serial = fields.get(HeaderFields.reply_serial)
            if serial in self._registering:
                self._registering.discard(serial)
                self._registered = kind is MessageType.method_return
                if self._registered:
                    log.info("tray: registered with the StatusNotifierWatcher as %s",
                             self.bus_name)
                else:
                    log.warning("tray: the StatusNotifierWatcher refused the icon: %s %s",
                                fields.get(HeaderFields.error_name), msg.body)
            return
        path, member = fields.get(HeaderFields.path), fields.get(HeaderFields.member)
        try:
            signature, body, after = self._answer(path, fields.get(HeaderFields.interface),
                                                  member, msg.body)
            reply = new_method_return(msg, signature, body)
        except LookupError as exc:
            reply, after = new_error(msg, "org.freedesktop.DBus.Error.UnknownMethod", "s",
                                     (f"{exc}",)), None
        except ValueError as exc:
            reply, after = new_error(msg, "org.freedesktop.DBus.Error.InvalidArgs", "s",
                                     (f"{exc}",)), None
        if not msg.header.flags & MessageFlag.no_reply_expected:
            self._router.send(reply)
        if after is not None:  # actions run once the caller has its answer
            after()

    def _answer(self, path: str | None, interface: str | None, member: str | None,
                args: tuple[Any, ...]) -> tuple[str | None, tuple[Any, ...],
                                                 Callable[[], None] | None]:
        """``(signature, body, action to run after the reply)`` for one method call."""
        own = {ITEM_PATH: (ITEM, self._item_props), MENU_PATH: (MENU, self._menu_props)}
        if member == "Introspect" and interface in (None, INTROSPECT):
            return "s", (introspection(path or "/"),), None
        if path in own and member == "Ping":
            return None, (), None
        if path in own and interface in (None, PROPS) and member in ("Get", "GetAll"):
            iface, props = own[path]
            if args[0] not in (iface, ""):
                raise ValueError(f"no interface {args[0]} at {path}")
            values = props()
            if member == "GetAll":
                return "a{sv}", (values,), None
            if args[1] not in values:
                raise ValueError(f"no property {args[1]}")
            return "v", (values[args[1]],), None
        if path == ITEM_PATH and interface in (None, ITEM):
            if member == "Activate":
                return None, (), self._activate
            if member in ("SecondaryActivate", "ContextMenu", "Scroll"):
                return None, (), None  # the host opens the exported menu by itself
        if path == MENU_PATH and interface in (None, MENU):
            return self._menu_call(member, args)
        raise LookupError(f"no method {interface}.{member} at {path}")

    def _menu_call(self, member: str | None, args: tuple[Any, ...]
                   ) -> tuple[str | None, tuple[Any, ...], Callable[[], None] | None]:
        if member == "GetLayout":
            parent, depth, names = args
            with self._menu_lock:
                node = self._node(parent)
                if node is None:
                    raise ValueError(f"no menu item {parent}")
                return "u(ia{sv}av)", (self._revision, node.struct(depth, names)), None
        if member == "GetGroupProperties":
            ids, names = args
            with self._menu_lock:
                nodes = [n for n in self._tree.walk() if not ids or n.id in ids]
                return "a(ia{sv})", ([(n.id, {k: v for k, v in n.props.items()
                                             if not names or k in names})
                                      for n in nodes],), None
        if member == "GetProperty":
            ident, name = args
            node = self._node(ident)
            if node is None or name not in node.props:
                raise ValueError(f"no property {name} on menu item {ident}")
            return "v", (node.props[name],), None
        if member == "Event":
            ident, kind = args[0], args[1]
            if self._node(ident) is None:
                raise ValueError(f"no menu item {ident}")

            def click() -> None:
                self._event(ident, kind)

            return None, (), click
        if member == "EventGroup":
            events = [(e[0], e[1]) for e in args[0]]
            unknown = [i for i, _k in events if self._node(i) is None]

            def run() -> None:
                for ident, kind in events:
                    self._event(ident, kind)

            return "ai", (unknown,), run
        if member == "AboutToShow":  # the menu opens: show the numbers as they are now
            return "b", (self._relayout(),), None
        if member == "AboutToShowGroup":
            changed = self._relayout()
            return "aiai", ([i for i in args[0] if changed], []), None
        raise LookupError(f"no method {MENU}.{member}")


_ITEM_XML = """<interface name="org.kde.StatusNotifierItem">
<property name="Category" type="s" access="read"/><property name="Id" type="s" access="read"/>
<property name="Title" type="s" access="read"/><property name="Status" type="s" access="read"/>
<property name="WindowId" type="i" access="read"/>
<property name="IconName" type="s" access="read"/>
<property name="IconPixmap" type="a(iiay)" access="read"/>
<property name="OverlayIconName" type="s" access="read"/>
<property name="OverlayIconPixmap" type="a(iiay)" access="read"/>
<property name="AttentionIconName" type="s" access="read"/>
<property name="AttentionIconPixmap" type="a(iiay)" access="read"/>
<property name="AttentionMovieName" type="s" access="read"/>
<property name="ToolTip" type="(sa(iiay)ss)" access="read"/>
<property name="ItemIsMenu" type="b" access="read"/>
<property name="Menu" type="o" access="read"/>
<property name="IconThemePath" type="s" access="read"/>
<method name="ContextMenu"><arg name="x" type="i"/><arg name="y" type="i"/></method>
<method name="Activate"><arg name="x" type="i"/><arg name="y" type="i"/></method>
<method name="SecondaryActivate"><arg name="x" type="i"/><arg name="y" type="i"/></method>
<method name="Scroll"><arg name="delta" type="i"/><arg name="orientation" type="s"/></method>
<signal name="NewTitle"/><signal name="NewIcon"/><signal name="NewAttentionIcon"/>
<signal name="NewOverlayIcon"/><signal name="NewToolTip"/>
<signal name="NewStatus"><arg name="status" type="s"/></signal>
</interface>"""

_MENU_XML = """<interface name="com.canonical.dbusmenu">
<property name="Version" type="u" access="read"/>
<property name="TextDirection" type="s" access="read"/>
<property name="Status" type="s" access="read"/>
<property name="IconThemePath" type="as" access="read"/>
<method name="GetLayout"><arg type="i" direction="in"/><arg type="i" direction="in"/>
<arg type="as" direction="in"/><arg type="u" direction="out"/>
<arg type="(ia{sv}av)" direction="out"/></method>
<method name="GetGroupProperties"><arg type="ai" direction="in"/>
<arg type="as" direction="in"/><arg type="a(ia{sv})" direction="out"/></method>
<method name="GetProperty"><arg type="i" direction="in"/><arg type="s" direction="in"/>
<arg type="v" direction="out"/></method>
<method name="Event"><arg type="i" direction="in"/><arg type="s" direction="in"/>
<arg type="v" direction="in"/><arg type="u" direction="in"/></method>
<method name="EventGroup"><arg type="a(isvu)" direction="in"/>
<arg type="ai" direction="out"/></method>
<method name="AboutToShow"><arg type="i" direction="in"/><arg type="b" direction="out"/>
</method>
<method name="AboutToShowGroup"><arg type="ai" direction="in"/>
<arg type="ai" direction="out"/><arg type="ai" direction="out"/></method>
<signal name="ItemsPropertiesUpdated"><arg type="a(ia{sv})"/><arg type="a(ias)"/></signal>
<signal name="LayoutUpdated"><arg type="u"/><arg type="i"/></signal>
<signal name="ItemActivationRequested"><arg type="i"/><arg type="u"/></signal>
</interface>"""

_STANDARD_XML = """<interface name="org.freedesktop.DBus.Properties">
<method name="Get"><arg type="s" direction="in"/><arg type="s" direction="in"/>
<arg type="v" direction="out"/></method>
<method name="GetAll"><arg type="s" direction="in"/><arg type="a{sv}" direction="out"/>
</method></interface>
<interface name="org.freedesktop.DBus.Introspectable">
<method name="Introspect"><arg type="s" direction="out"/></method></interface>"""


def introspection(path: str) -> str:
    """The introspection XML of ``path`` (hosts built on Qt read it before calling)."""
    head = ('<!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"'
            ' "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">\n<node>')
    body = {ITEM_PATH: _ITEM_XML + _STANDARD_XML, MENU_PATH: _MENU_XML + _STANDARD_XML,
            "/": '<node name="StatusNotifierItem"/><node name="MenuBar"/>'}
    return f"{head}{body.get(path, '')}</node>"
