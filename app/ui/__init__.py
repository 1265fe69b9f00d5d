"""Shared pieces of the Streamlit app: config forms, cached runs and Plotly charts.

Pages import this package after `app/views/_path.py` puts `app/` on `sys.path` (the app is run with
`streamlit run app/streamlit_app.py`; it is not an installed package).
"""
import fidelity.workloads  # noqa: F401  (registers the sources' workload kinds and trace formats, as the CLI does)
