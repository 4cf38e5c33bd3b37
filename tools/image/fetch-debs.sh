#!/usr/bin/env bash
# Fetches the arm64 Debian packages pinned in tools/image/debs.lock into a cache directory
# (default target/images/debs), checking each one's SHA-256, without changing the host's
# package state: apt runs with a private configuration (architecture arm64, its own state
# and cache directories) over the host's own sources.
#
# Usage: tools/image/fetch-debs.sh [CACHE_DIR [PACKAGE...]]   (default: every pinned package)
#        tools/image/fetch-debs.sh --pin [PACKAGE...]    print lock lines for the versions
#                                                       apt offers now
set -euo pipefail
cd "$(dirname "$0")/../.."

lock=tools/image/debs.lock
work=target/images/apt
mkdir -p "$work/state/lists/partial" "$work/cache/archives/partial" "$work/empty"
cat > "$work/apt.conf" <<CONF
APT::Architecture "arm64";
APT::Architectures { "arm64"; };
Dir::State "$PWD/$work/state";
Dir::Cache "$PWD/$work/cache";
Dir::Etc::Preferences "$PWD/$work/empty/none";
Dir::Etc::PreferencesParts "$PWD/$work/empty";
Acquire::Languages "none";
APT::Sandbox::User "$(id -un)";
CONF
export APT_CONFIG="$PWD/$work/apt.conf"

# The package lists, once a day at most.
lists_stamp="$work/state/updated"
if [[ ! -e $lists_stamp ]] || [[ -n $(find "$lists_stamp" -mmin +1440) ]]; then
    apt-get -qq update
    touch "$lists_stamp"
fi

packages() { grep -v '^#' "$lock" | awk 'NF == 3'; }

if [[ ${1:-} == --pin ]]; then
    shift
    { packages | awk '{ print $1 }'; printf '%s\n' "$@"; } | sort -u | while read -r name; do
        [[ -n $name ]] || continue
        apt-cache show "$name" | awk -v n="$name" '
            /^Version:/ { v = $2 } /^SHA256:/ { printf "%-30s %-24s %s\n", n, v, $2; exit }'
    done
    exit 0
fi

cache=${1:-target/images/debs}
(($#)) && shift
mkdir -p "$cache"
wanted=("$@")
for w in "${wanted[@]}"; do
    packages | awk -v n="$w" '$1 == n { found = 1 } END { exit !found }' || {
        echo "fetch-debs: $w is not pinned in $lock (is its component in the apt sources? then" >&2
        echo "pin it: tools/image/fetch-debs.sh --pin $w)" >&2
        exit 1
    }
done
packages | while read -r name version sha; do
    if ((${#wanted[@]})) && [[ " ${wanted[*]} " != *" $name "* ]]; then continue; fi
    file="$cache/${name}_${version//:/%3a}_arm64.deb"
    if [[ -e $file ]] && echo "$sha  $file" | sha256sum -c --quiet - >/dev/null 2>&1; then
        continue
    fi
    tmp=$(mktemp -d "$cache/.fetch.XXXXXX")
    if ! (cd "$tmp" && apt-get -qq download "$name=$version"); then
        rm -rf "$tmp"
        echo "fetch-debs: $name $version is not offered by the apt sources (dropped by a point" >&2
        echo "release?): pin the current one with tools/image/fetch-debs.sh --pin" >&2
        exit 1
    fi
    got=("$tmp"/*.deb)
    if ! echo "$sha  ${got[0]}" | sha256sum -c --quiet -; then
        rm -rf "$tmp"
        echo "fetch-debs: $name $version does not have the pinned SHA-256: refusing it" >&2
        exit 1
    fi
    mv "${got[0]}" "$file"
    rm -rf "$tmp"
    echo "fetched $file"
done
