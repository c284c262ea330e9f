"""The catalogue: all 38 indicators in chartgen's registry order (contract §3.4).

The order here is the order of list_indicators.  Each indicator lives in its own module
and exports an ``IndicatorDef``; this module only assembles them.
"""

from __future__ import annotations

from engine.indicators.base import IndicatorDef
from engine.indicators.external.fear_greed import FEAR_GREED
from engine.indicators.external.funding import FUNDING
from engine.indicators.external.long_short import LONG_SHORT
from engine.indicators.external.open_interest import OPEN_INTEREST
from engine.indicators.overlays.bands import BBANDS, DONCHIAN, KELTNER
from engine.indicators.overlays.heikin_ashi import HEIKIN_ASHI
from engine.indicators.overlays.ichimoku import ICHIMOKU
from engine.indicators.overlays.moving_averages import EMA_STACK
from engine.indicators.overlays.pivot import PIVOT
from engine.indicators.overlays.sar import SAR
from engine.indicators.overlays.supertrend import SUPERTREND
from engine.indicators.overlays.vwap import VWAP, VWAP_BANDS
from engine.indicators.panels.adx import ADX
from engine.indicators.panels.cipher_b import CIPHER_B
from engine.indicators.panels.kalman_volume import KALMAN_VOLUME
from engine.indicators.panels.macd import MACD
from engine.indicators.panels.oscillators import CCI, MFI, ROC, RSI, STOCH, WILLIAMS_R
from engine.indicators.panels.rsi_mfi_stoch import RSI_MFI_STOCH
from engine.indicators.panels.volatility import ATR, HISTVOL
from engine.indicators.panels.volume_flow import AD, CMF, CVD, OBV
from engine.indicators.panels.wavetrend import WAVETREND
from engine.indicators.profiles.hvn_lvn import HVN_LVN
from engine.indicators.profiles.naked_poc import NAKED_POC
from engine.indicators.profiles.session_vp import SESSION_VP
from engine.indicators.profiles.tpo import TPO
from engine.indicators.profiles.volume_profile import VOLUME_PROFILE

CATALOG: tuple[IndicatorDef, ...] = (
    # overlays
    EMA_STACK,
    BBANDS,
    KELTNER,
    DONCHIAN,
    VWAP,
    VWAP_BANDS,
    SUPERTREND,
    SAR,
    ICHIMOKU,
    HEIKIN_ASHI,
    PIVOT,
    VOLUME_PROFILE,
    SESSION_VP,
    HVN_LVN,
    NAKED_POC,
    TPO,
    # panels
    CIPHER_B,
    MACD,
    RSI,
    WAVETREND,
    STOCH,
    ATR,
    OBV,
    CCI,
    ROC,
    MFI,
    WILLIAMS_R,
    CMF,
    ADX,
    AD,
    HISTVOL,
    KALMAN_VOLUME,
    RSI_MFI_STOCH,
    # volume delta and the external (network) indicators
    CVD,
    FUNDING,
    OPEN_INTEREST,
    LONG_SHORT,
    FEAR_GREED,
)
