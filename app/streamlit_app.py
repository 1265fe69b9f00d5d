"""servesim's planner app: `streamlit run app/streamlit_app.py`.

Pages: Simulate (one config), Compare (two to four side by side), Capacity (SLO search and the
cheapest layout), Validate (predicted vs measured on the real engine).
"""
import sys
from pathlib import Path

import streamlit as st

st.set_page_config(page_title="servesim", layout="wide")
PAGES = Path(__file__).resolve().parent / "views"
if str(PAGES) not in sys.path:  # the views import their `_path` helper (AppTest runs them from views/)
    sys.path.insert(0, str(PAGES))
nav = st.navigation([
    st.Page(str(PAGES / "simulate.py"), title="Simulate", default=True),
    st.Page(str(PAGES / "compare.py"), title="Compare"),
    st.Page(str(PAGES / "capacity.py"), title="Capacity"),
    st.Page(str(PAGES / "validate.py"), title="Validate"),
])
nav.run()
