package web

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
)

// A bar chart drawn on the server as inline SVG: the template writes one
// <rect> per bar and one <text> per label from these numbers, escaping
// every name, so the page needs no script to plot.

// Chart geometry, in SVG user units.
const (
	chartW, chartH = 640, 220
	padL, padR     = 48, 8
	padT, padB     = 24, 28
	legendRow      = 16
)

// palette colours the series, in sorted series order.
var palette = []string{"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"}

// barChart is one chart ready to draw.
type barChart struct {
	Title   string
	W, H    int
	Empty   bool // nothing to plot
	Bars    []bar
	XLabels []label
	YLabels []label
	Grid    []float64 // y of each grid line
	Legend  []legendItem
	PlotL   float64 // the plot area's left edge, right edge and base line
	PlotR   float64
	Base    float64
}

type bar struct {
	X, Y, W, H float64
	Fill       string
	Title      string // shown on hover: series, label and value
}

type label struct {
	X, Y float64
	Text string
}

type legendItem struct {
	X, Y float64
	Fill string
	Text string
}

// stackedBars stacks each series' value per label, series in sorted order.
// series maps a name to one value per label; a value must not be negative.
func stackedBars(title, unit string, labels []string, series map[string][]float64) barChart {
	names := slices.Sorted(maps.Keys(series))
	c := barChart{Title: title, W: chartW}
	legendRows := (len(names) + 3) / 4
	c.H = chartH + legendRows*legendRow
	c.PlotL, c.PlotR, c.Base = padL, chartW-padR, chartH-padB
	top := 0.0
	for i := range labels {
		sum := 0.0
		for _, n := range names {
			sum += series[n][i]
		}
		top = max(top, sum)
	}
	c.Empty = top == 0
	scale := niceCeil(top)
	if scale == 0 {
		scale = 1
	}
	plotH := float64(chartH - padT - padB)
	slot := (c.PlotR - c.PlotL) / float64(max(len(labels), 1))
	for k := 0; k <= 4; k++ {
		v := scale * float64(k) / 4
		y := c.Base - plotH*v/scale
		c.Grid = append(c.Grid, y)
		c.YLabels = append(c.YLabels, label{X: c.PlotL - 4, Y: y + 4, Text: format(v)})
	}
	for i, l := range labels {
		x := c.PlotL + slot*float64(i)
		if len(labels) <= 16 || i%2 == 0 {
			c.XLabels = append(c.XLabels, label{X: x + slot/2, Y: c.Base + 16, Text: l})
		}
		y := c.Base
		for si, n := range names {
			v := series[n][i]
			if v <= 0 {
				continue
			}
			h := plotH * v / scale
			y -= h
			c.Bars = append(c.Bars, bar{X: x + slot*0.15, Y: y, W: slot * 0.7, H: h, Fill: palette[si%len(palette)],
				Title: fmt.Sprintf("%s, %s: %s %s", n, l, format(v), unit)})
		}
	}
	for i, n := range names {
		c.Legend = append(c.Legend, legendItem{X: c.PlotL + float64(i%4)*150, Y: float64(chartH + (i/4)*legendRow), Fill: palette[i%len(palette)], Text: n})
	}
	return c
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 0
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// format writes v with as few digits as it needs, up to two decimals.
func format(v float64) string {
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
}
