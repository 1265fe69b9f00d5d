"""What the app keeps across page switches, and the names of uploaded files.

Streamlit drops the state of every keyed widget that a run does not render, so switching pages
would reset the page left behind. Each input's key goes through `kept`: its value is copied into a
plain session-state entry (which Streamlit never drops) and written back when the page comes back.
Buttons, file uploaders and data editors cannot be set through the session state; the pages keep
what those gave (an uploaded trace, edited prices) themselves.
"""
from __future__ import annotations

import streamlit as st

STORE = "app.kept"  # {widget key: its last value}
UPLOADS = "app.uploads"  # {temporary path of an upload: the name of the file the user uploaded}


def kept(key: str) -> str:
    """`key`, for a widget rendered right after: its value is remembered, and restored if dropped."""
    store = st.session_state.setdefault(STORE, {})
    if key in st.session_state:
        store[key] = st.session_state[key]
    elif key in store:  # dropped while another page was shown
        st.session_state[key] = store[key]
    return key


def keep_value(key: str, value=None):
    """A page's own value under `key` (not a widget's): store `value` if given; return the kept one."""
    store = st.session_state.setdefault(STORE, {})
    if value is not None:
        store[key] = value
    return store.get(key)


def forget(key: str) -> None:
    st.session_state.setdefault(STORE, {}).pop(key, None)


def kept_upload(label: str, key: str, **kwargs) -> tuple[str, bytes, bool] | None:
    """`st.file_uploader(label, key=key, **kwargs)` whose file outlives a page switch: (its name, its
    bytes, whether it is the one kept from before), or None. An uploader cannot be set through the
    session state, so after a page switch it is empty while the page goes on with the file it had,
    until the user uploads another or removes the one shown."""
    shown = key in st.session_state  # rendered in the last run (not dropped by a page switch)
    uploaded = st.file_uploader(label, key=key, **kwargs)
    live = f"{key}.live"
    had_file = st.session_state.get(live, False)
    st.session_state[live] = uploaded is not None
    if uploaded is not None:
        keep_value(key, (uploaded.name, uploaded.getvalue()))
        return uploaded.name, uploaded.getvalue(), False
    if shown and had_file:  # the user removed the file
        forget(key)
    last = keep_value(key)
    return None if last is None else (*last, True)


def remember_upload(path: str, name: str) -> None:
    """`path` (a temporary copy) holds the file the user uploaded as `name`."""
    st.session_state.setdefault(UPLOADS, {})[str(path)] = name


def with_upload_names(message: str) -> str:
    """`message` with each uploaded file's temporary path replaced by the name it was uploaded as."""
    for path, name in st.session_state.get(UPLOADS, {}).items():
        message = message.replace(path, name)
    return message
