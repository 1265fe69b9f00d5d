"""Put `app/` on sys.path so a page can `import ui` whether run by streamlit or by AppTest."""
import sys
from pathlib import Path

APP_DIR = Path(__file__).resolve().parents[1]
if str(APP_DIR) not in sys.path:
    sys.path.insert(0, str(APP_DIR))
