# tools/gpu-check-figures.sh — sourced by tools/gpu-check (and by its test):
# the parsers that turn each step's output ($TMPD/STEP.txt) into summary
# lines. figure NAME VALUE BASELINE RATIO BAR VERDICT and note TEXT come from
# the caller; every figure names its same-run baseline and its bar.
# shellcheck shell=bash

num() { sed -nE "s#$1#\\1#p" | head -1; }

verdict() {
	[ "$1" = - ] && { echo "NOT RUN (no baseline)"; return; }
	awk -v r="$1" -v b="$2" 'BEGIN { print (r + 0 >= b + 0) ? "PASS" : "FAIL" }'
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 > 0) printf "%.2f", a / b; else print "-" }'; }

quant_figures() {
	# per shape: "device, N copies (M MiB)  ms  GB/s  D2D memcpy of the input  GB/s ratio exact"
	awk '/^requantfs bench quant --device cuda:/ { match($0, /\[[0-9]+ x [0-9]+\]/); shape = substr($0, RSTART + 1, RLENGTH - 2); gsub(/ /, "", shape) }
	     /^device, [0-9]+ copies/ { print shape, $(NF-8), $(NF-2), $NF }' "$TMPD/bench-quant.txt" |
	while read -r shape g d ex; do
		local r; r=$(ratio "$g" "$d")
		figure "quant-gpu $shape" "$g GB/s (BF16 in + codes/scales out, HBM-bound copies; exact: $ex)" \
		       "D2D copy $d GB/s (read + write)" "$r" ">= 0.50 of HBM" \
		       "$([ "$ex" = yes ] && verdict "$r" 0.50 || echo 'FAIL (bytes differ)')"
	done
	# "RxC SCHEME observer O on GPU+CPU T ms G GB/s, CPU job C ms (N threads): xR; the search
	# on the GPU: yes|no ...; same bytes: yes|NO"
	sed -nE 's#^([0-9]+x[0-9]+) ([a-z0-9-]+) observer ([a-z-]+) on GPU\+CPU +([0-9.]+) ms .*CPU job +([0-9.]+) ms \(([0-9]+) threads\): x([0-9.]+); the search on the GPU: (yes|no).*; same bytes: (yes|NO)$#\1 \2 \3 \4 \5 \6 \7 \8 \9#p' \
		"$TMPD/bench-quant.txt" | while read -r shape sc o ms cms th r gpu same; do
		figure "quant-gpu observer $o $sc $shape" "$ms ms (search on the GPU: $gpu; same bytes: $same)" \
		       "CPU job $cms ms ($th threads)" "$r" "no bar" \
		       "$([ "$same" = yes ] && [ "$gpu" = yes ] && echo INFO || echo FAIL)"
	done
	awk '/^host->host, fused pair/ { print $(NF-7), $(NF-2) }' "$TMPD/bench-quant.txt" | head -1 |
	while read -r g b; do
		figure "quant-gpu host->host pair" "$g GB/s" "H2D+D2H copies $b GB/s" "$(ratio "$g" "$b")" "no bar" INFO
	done
}

# engine_figures STEP LAYERS: the figures of one `bench engine` run; the bar
# applies to the whole depth (48 layers measured, or extrapolated from 4)
engine_figures() {
	local f=$TMPD/$1.txt L=$2 d2d
	d2d=$(num '^copy bandwidth: device->device ([0-9.]+) GB/s.*' <"$f")
	grep -E '^prefill +[0-9]+ tokens:' "$f" | while read -r _ n _ tps _; do
		figure "engine prefill ${n} L$L" "$tps tok/s ($L layers of real dims)" "-" "-" "no bar" INFO
	done
	local l
	l=$(grep -m1 '^decode at position' "$f")
	if [ -n "$l" ]; then
		local tps gbs
		tps=$(num '.* ([0-9.]+) tokens/s;.*' <<<"$l")
		gbs=$(num '.* = ([0-9.]+) GB/s,.*' <<<"$l")
		if [ "$L" = 48 ]; then
			figure "engine decode 48 layers" "$tps tok/s, $gbs GB/s read (weights + KV)" \
			       "D2D copy $d2d GB/s" "$(ratio "$gbs" "$d2d")" ">= 0.75 of HBM" \
			       "$(verdict "$(ratio "$gbs" "$d2d")" 0.75)"
		else
			figure "engine decode $L layers" "$tps tok/s, $gbs GB/s read" "D2D copy $d2d GB/s" \
			       "$(ratio "$gbs" "$d2d")" "no bar ($L layers: fixed costs)" INFO
		fi
	fi
	l=$(grep -m1 '^extrapolated to 48 layers' "$f")
	if [ -n "$l" ] && [ "$L" != 48 ]; then
		local tps gbs roof
		tps=$(num '.*, ([0-9.]+) tokens/s;.*' <<<"$l")
		gbs=$(num '.*: ([0-9.]+) GB/s, .*' <<<"$l")
		roof=$(num '.*roofline at copy bandwidth ([0-9.]+) tokens/s.*' <<<"$l")
		figure "engine decode 48 (extrap.)" "$tps tok/s, $gbs GB/s read" \
		       "D2D copy $d2d GB/s (roofline $roof tok/s)" "$(ratio "$gbs" "$d2d")" \
		       ">= 0.75 of HBM" "$(verdict "$(ratio "$gbs" "$d2d")" 0.75)"
	fi
	# "format bf16   [R x C]: X MB of weights per call, U us, G GB/s of weights, P% of the
	# copy (D GB/s)": decode's roofline fraction per weight format, same-run copy
	sed -nE 's#^format ([a-z0-9]+) +\[([0-9]+) x ([0-9]+)\]: .* ([0-9.]+) GB/s of weights, .*\(([0-9.]+) GB/s\)$#\1 \2x\3 \4 \5#p' "$f" |
	while read -r fm shape g d; do
		figure "engine decode GEMV $fm" "$g GB/s of $fm weights ([$shape], T = 1, cold)" \
		       "D2D copy $d GB/s" "$(ratio "$g" "$d")" "no bar" INFO
	done
	[ -n "$d2d" ] || note "  bench engine: no figures parsed (see bench.log)"
}

ops_figures() {
	# "TAG {"op":"qkvg",...,"us":12.3,...,"gbs":3456.7,"d2d_gbs":4300.0,...}"; TAG pdl, nopdl or @POS
	grep -hE '^[^ ]+ \{"op"' "$TMPD/ops.txt" 2>/dev/null | while read -r tag j; do
		local op us g d name
		op=$(num '.*"op": *"([^"]*)".*' <<<"$j")
		us=$(num '.*"us": *([0-9.eE+-]+).*' <<<"$j")
		g=$(num '.*"gbs": *([0-9.eE+-]+).*' <<<"$j")
		d=$(num '.*"d2d_gbs": *([0-9.eE+-]+).*' <<<"$j")
		case $tag in
		pdl) name=$op ;;
		@*) name=$op$tag ;;
		*) name="$op $tag" ;;
		esac
		if [ "$name" = attn_full@16383 ]; then     # attn's own target for 16K keys
			figure "op $name" "$us us, $g GB/s" "D2D copy $d GB/s" "$(ratio "$g" "$d")" \
			       ">= 0.60 of copy" "$(verdict "$(ratio "$g" "$d")" 0.60)"
		else
			figure "op $name" "$us us, $g GB/s" "D2D copy $d GB/s" "$(ratio "$g" "$d")" "no bar" INFO
		fi
		echo "$tag $op $us" >>"$TMPD/op-us.txt"
	done
	[ -f "$TMPD/op-us.txt" ] || return 0
	# what PDL buys per op: us without it / us with it
	awk '$1 == "pdl" { p[$2] = $3 } $1 == "nopdl" { n[$2] = $3 }
	     END { for (o in n) if (o in p) print o, n[o], p[o] }' "$TMPD/op-us.txt" | sort |
	while read -r op un up; do
		figure "op $op PDL gain" "$up us with PDL" "$un us with EK_PDL=0" "$(ratio "$un" "$up")" \
		       "no bar" INFO
	done
}

pdl_figures() {
	local f=$TMPD/pdl.txt
	# "=== EK_PDL=0 [position P]" then "decode at position P: X ms/token, Y tokens/s ..."
	awk '/^=== EK_/ { v = $2 } /^decode at position/ { sub(/:$/, "", $4); print v, $4, $5, $7 }' "$f" |
		tee "$TMPD/pdl-ms.txt" | while read -r v pos ms tps; do
		figure "decode $v pos $pos" "$ms ms/token, $tps tok/s (4 layers)" "-" "-" "no bar" INFO
	done
	awk '$1 == "EK_PDL=0" { n[$2] = $3 } $1 == "EK_PDL=1" { p[$2] = $3 }
	     END { for (k in n) if (k in p) print k, n[k], p[k] }' "$TMPD/pdl-ms.txt" | sort -n |
	while read -r pos mn mp; do
		figure "decode pos $pos PDL gain" "$mp ms/token with PDL" "$mn ms/token with EK_PDL=0" \
		       "$(ratio "$mn" "$mp")" "no bar" INFO
	done
	# "logits WHAT: identical (N bytes)" | "logits WHAT close: ..." | "logits WHAT FAIL: ..."
	grep -h '^logits ' "$f" | while read -r l; do
		local v=PASS what=${l#logits } res
		case $l in
		*" FAIL: "*) v=FAIL what=${what%% FAIL: *} res=${l#* FAIL: } ;;
		*" close: "*) what=${what%% close: *} res=${l#* close: } ;;
		*": identical"*) what=${what%%: identical*} res="identical${l#*: identical}" ;;
		*) v=FAIL res="unparsed: $l" ;;
		esac
		figure "logits $what" "$res" "-" "-" "identical or <= 1e-5" "$v"
	done
	grep -h -E '^(kernels per decode step|ek-engine EK_PDL)' "$f" | sort -u | sed 's/^/  /' |
		tee -a "$SUMMARY" >/dev/null
}

jit_figures() {
	local l; l=$(grep -m1 '^jit-load eager' "$TMPD/jit.txt")
	if [ -n "$l" ]; then
		local tn tj
		tn=$(num '.*native ([0-9.]+)s.*' <<<"$l")
		tj=$(num '.*JIT ([0-9.]+)s.*' <<<"$l")
		figure "jit all kernels (eager)" "$(awk -v a="$tj" -v b="$tn" 'BEGIN { printf "%.2f", a - b }') s of JIT (${tj}s)" \
		       "native SASS load ${tn}s" "$(ratio "$tj" "$tn")" "no bar" INFO
	fi
	[ -f "$TMPD/times-jit.txt" ] || return 0
	while read -r _ name st secs; do
		local nat; nat=$(awk -v n="$name" '$2 == n { print $4 }' "$TMPD/times-native.txt" 2>/dev/null)
		figure "jit test $name" "$st in ${secs}s" "native ${nat:-?}s" "$(ratio "$secs" "${nat:-0}")" \
		       "must be OK" "$([ "$st" = OK ] && echo PASS || echo FAIL)"
	done <"$TMPD/times-jit.txt"
}

life_figures() {
	grep -h '^lifecycle-check' "$TMPD/lifecycle.txt" | sed 's/^/  /' | tee -a "$SUMMARY" >/dev/null
	grep -h '^lifecycle: \(opened\|fallback\)' "$TMPD/lifecycle.txt" | sed 's/^/  /' |
		tee -a "$SUMMARY" >/dev/null
	! grep -q '^lifecycle-check.* FAIL' "$TMPD/lifecycle.txt"
}
