#!/usr/bin/env bash
# Fetches the real photos the examples train and evaluate on, from Debian
# packages, without root and without installing anything system-wide:
#   DIR/train/*.jpg  photographic KDE Plasma wallpapers (2560x1600), from
#                    plasma-workspace-wallpapers
#   DIR/eval/*.png   real photos among scikit-image's data images (astronaut,
#                    camera, chelsea, coffee, ...), from python3-skimage
#   DIR/mri/*.nii.gz MRI volumes and label atlases in one space, from
#                    mricron-data: T1 volumes of one human subject (ch2,
#                    ch2bet = skull-stripped, ch2better = another acquisition
#                    of the same subject), atlases aligned to it (aal,
#                    HarvardOxford cortical, JHU white matter, brodmann, with
#                    the region names of aal and JHU as .txt), and a macaque
#                    T1 with NeuroMaps labels (inia19)
#   DIR/digits/digits.csv.gz  scikit-learn's handwritten digits (1,797 8x8
#                    images with labels), from python3-sklearn
#   DIR/text/kjv.txt the King James Bible (public domain), one verse per
#                    line without its reference, 4.3 MB of ASCII: decoded
#                    from bible-kjv-text's compressed file by the `bible`
#                    program of bible-kjv, both run from CACHE
# The .deb files are fetched with `apt-get download` and unpacked with
# `dpkg -x` into CACHE (default DIR/cache, i.e. ./data/cache).
#
# Usage: scripts/fetch_data.sh [--mri-only] [DIR]   (DIR defaults to ./data)
#        CACHE=/path scripts/fetch_data.sh [DIR]
# --mri-only fetches DIR/mri alone (mricron-data, a 16 MB package; the tests on
# the real MRI use it).
# Idempotent: files already in place are left alone. Needs apt's package
# lists; when `apt-get download` finds nothing it runs `apt-get update` (with
# sudo when not root) once and retries.
set -euo pipefail

mri_only=0
if [ "${1:-}" = "--mri-only" ]; then
  mri_only=1
  shift
fi
dir="${1:-./data}"
cache="${CACHE:-$dir/cache}"
wallpaper_pkg=plasma-workspace-wallpapers
skimage_pkg=python3-skimage
mri_pkg=mricron-data
digits_pkg=python3-sklearn
text_pkgs=(bible-kjv-text bible-kjv)

# Photographs among the package's wallpapers (the others are vector art or
# renders: Altai, Canopee, Cascade, Cluster, Elarun, Flow, FlyingKonqui,
# Honeywave, IceCold, Kay, Kokkini, MilkyWay, Opal, PastelHills, Patak,
# SafeLanding, Shell, Volna). Each ships images/2560x1600.jpg.
train_photos=(Autumn BytheWater ColdRipple ColorfulCups DarkestHour EveningGlow FallenLeaf
              Grey Kite OneStandsOut Path summer_1am)
# Real photos among skimage/data (the rest are synthetic, binary or tiny).
eval_photos=(astronaut camera chelsea coffee coins moon motorcycle_left brick grass gravel)
# mricron-data's templates folder.
mri_files=(ch2.nii.gz ch2bet.nii.gz ch2better.nii.gz aal.nii.gz aal.nii.txt
           HarvardOxford-cort-maxprob-thr0-1mm.nii.gz JHU-WhiteMatter-labels-1mm.nii.gz
           JHU-WhiteMatter-labels-1mm.nii.txt brodmann.nii.gz inia19-t1-brain.nii.gz
           inia19-NeuroMaps.nii.gz)

log() { echo "fetch_data: $*"; }
die() { echo "fetch_data: error: $*" >&2; exit 1; }

command -v apt-get >/dev/null || die "apt-get not found (this script needs Debian/Ubuntu)"
command -v dpkg >/dev/null || die "dpkg not found"
mkdir -p "$cache" || die "cannot create cache folder $cache"
cache=$(cd "$cache" && pwd)  # absolute: apt-get download runs in a subshell cd

apt_update() {
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || die "apt-get update needs root and sudo is not installed"
    sudo="sudo"
  fi
  log "running ${sudo:+sudo }apt-get update"
  $sudo apt-get update -qq || die "apt-get update failed"
}

# Downloads package $1 into $cache/debs unless a .deb of it is already there.
download() {
  local pkg=$1 debs="$cache/debs"
  mkdir -p "$debs"
  if compgen -G "$debs/${pkg}_*.deb" >/dev/null; then
    log "$pkg: .deb already in $debs"
    return
  fi
  log "$pkg: apt-get download"
  if ! (cd "$debs" && apt-get download "$pkg" 2>"$cache/apt.err"); then
    log "$pkg: apt-get download failed ($(tail -n1 "$cache/apt.err")); updating package lists"
    apt_update
    (cd "$debs" && apt-get download "$pkg") ||
      die "apt-get download $pkg failed even after apt-get update"
  fi
}

# Unpacks package $1 into $cache/root unless already unpacked.
unpack() {
  local pkg=$1 stamp="$cache/root/.unpacked-$1"
  if [ -e "$stamp" ]; then
    log "$pkg: already unpacked in $cache/root"
    return
  fi
  mkdir -p "$cache/root"
  local deb
  deb=$(compgen -G "$cache/debs/${pkg}_*.deb" | head -n1)
  log "$pkg: dpkg -x $(basename "$deb")"
  dpkg -x "$deb" "$cache/root" || die "dpkg -x $deb failed"
  touch "$stamp"
}

# Copies $1 to $2 unless $2 exists; counts copies in $copied.
place() {
  local src=$1 dst=$2
  [ -f "$src" ] || die "expected $src in the unpacked package, not found"
  if [ -s "$dst" ]; then
    skipped=$((skipped + 1))
    return
  fi
  cp -L "$src" "$dst.tmp" && mv "$dst.tmp" "$dst"
  copied=$((copied + 1))
}

all_present() {
  local name
  for name in "${mri_files[@]}"; do [ -s "$dir/mri/$name" ] || return 1; done
  [ "$mri_only" = 1 ] && return 0
  for name in "${train_photos[@]}"; do [ -s "$dir/train/$name.jpg" ] || return 1; done
  for name in "${eval_photos[@]}"; do [ -s "$dir/eval/$name.png" ] || return 1; done
  [ -s "$dir/digits/digits.csv.gz" ] || return 1
  [ -s "$dir/text/kjv.txt" ] || return 1
}
if all_present; then
  [ "$mri_only" = 1 ] && { log "all ${#mri_files[@]} MRI files already in $dir/mri; nothing to do"; exit 0; }
  log "all ${#train_photos[@]} train and ${#eval_photos[@]} eval photos, ${#mri_files[@]} MRI files, the digits and the text already in $dir; nothing to do"
  exit 0
fi

packages=("$wallpaper_pkg" "$skimage_pkg" "$mri_pkg" "$digits_pkg" "${text_pkgs[@]}")
[ "$mri_only" = 1 ] && packages=("$mri_pkg")
for pkg in "${packages[@]}"; do
  download "$pkg"
  unpack "$pkg"
done

place_mri() {
  copied=0 skipped=0
  mkdir -p "$dir/mri"
  for name in "${mri_files[@]}"; do
    place "$cache/root/usr/share/mricron/templates/$name" "$dir/mri/$name"
  done
  log "mri: ${#mri_files[@]} files in $dir/mri ($copied copied, $skipped already there)"
}
if [ "$mri_only" = 1 ]; then
  place_mri
  exit 0
fi

mkdir -p "$dir/train" "$dir/eval"
copied=0 skipped=0
walls="$cache/root/usr/share/wallpapers"
for name in "${train_photos[@]}"; do
  place "$walls/$name/contents/images/2560x1600.jpg" "$dir/train/$name.jpg"
done
log "train: ${#train_photos[@]} photos in $dir/train ($copied copied, $skipped already there)"

copied=0 skipped=0
skdata=$(dirname "$(compgen -G "$cache/root/usr/lib/python3*/dist-packages/skimage/data/astronaut.png" | head -n1)")
[ -d "$skdata" ] || die "skimage/data not found under $cache/root"
for name in "${eval_photos[@]}"; do
  place "$skdata/$name.png" "$dir/eval/$name.png"
done
log "eval: ${#eval_photos[@]} photos in $dir/eval ($copied copied, $skipped already there)"

place_mri

copied=0 skipped=0
mkdir -p "$dir/digits"
digits=$(compgen -G "$cache/root/usr/lib/python3*/dist-packages/sklearn/datasets/data/digits.csv.gz" | head -n1)
[ -n "$digits" ] || die "sklearn/datasets/data/digits.csv.gz not found under $cache/root"
place "$digits" "$dir/digits/digits.csv.gz"
log "digits: 1,797 labelled 8x8 images in $dir/digits ($copied copied, $skipped already there)"
mkdir -p "$dir/text"
if [ -s "$dir/text/kjv.txt" ]; then
  log "text: $dir/text/kjv.txt already there"
else
  # Every verse from Genesis 1:1 to Revelation 22:21, "Ge1:1 In the
  # beginning ..." a line; the reference is cut off.
  "$cache/root/usr/bin/bible" -p "$cache/root/usr/lib" -f 'gen1:1-rev22:21' |
    sed -E 's/^[0-9]?[A-Za-z]+[0-9]+:[0-9]+ //' >"$dir/text/kjv.txt.tmp" ||
    die "the bible program of bible-kjv failed"
  [ "$(wc -c <"$dir/text/kjv.txt.tmp")" -gt 4000000 ] || die "the decoded bible is too short"
  mv "$dir/text/kjv.txt.tmp" "$dir/text/kjv.txt"
  log "text: the King James Bible in $dir/text/kjv.txt"
fi
du -sh "$dir/train" "$dir/eval" "$dir/mri" "$dir/digits" "$dir/text" | sed 's/^/fetch_data: /'
