"""The dark palette: check boxes and radio buttons must stand out from the base they sit on
(Fusion outlines them in a darkened window colour, black on black in a dark palette)."""

import pytest
from PySide6.QtWidgets import QApplication, QCheckBox, QRadioButton, QStyle, \
    QStyleOptionButton

from ui import theme

pytestmark = pytest.mark.gui


@pytest.fixture
def dark_app(qapp, monkeypatch):
    monkeypatch.setenv("CAIRN_CONSOLE_THEME", "dark")
    old_style, old_palette = qapp.style().name(), qapp.palette()
    theme.apply(qapp)
    yield qapp
    QApplication.setStyle(old_style)
    qapp.setPalette(old_palette)


def outline_contrast(widget, sub_element):
    """The largest difference in lightness between the indicator's edge pixels and the
    widget's background around it."""
    opt = QStyleOptionButton()
    opt.initFrom(widget)
    rect = widget.style().subElementRect(sub_element, opt, widget)
    img = widget.grab().toImage()
    background = img.pixelColor(rect.right() + 3, rect.center().y()).lightness()
    edge = [img.pixelColor(x, y).lightness()
            for x in range(rect.left(), rect.right() + 1)
            for y in range(rect.top(), rect.bottom() + 1)
            if x in (rect.left(), rect.left() + 1, rect.right() - 1, rect.right())
            or y in (rect.top(), rect.top() + 1, rect.bottom() - 1, rect.bottom())]
    return max(abs(v - background) for v in edge)


@pytest.mark.parametrize("cls, sub", [
    (QCheckBox, QStyle.SubElement.SE_CheckBoxIndicator),
    (QRadioButton, QStyle.SubElement.SE_RadioButtonIndicator)])
def test_an_unchecked_indicator_stands_out_on_the_dark_palette(dark_app, qtbot, cls, sub):
    w = cls("a choice")
    qtbot.addWidget(w)
    w.resize(160, 30)
    w.show()
    assert theme._is_dark(w.palette())
    assert outline_contrast(w, sub) >= 60
