# shellcheck shell=bash
# Sourced by the launchers (launch/*.sh) from the repository root: each
# environment variable a launcher reads is declared once, with its default
# and what it may hold, and checked before any work. A bad value is refused
# naming the variable (exit 1, "LAUNCHER: NAME ..." on stderr) instead of
# failing a stage later, or a summary script at the end. A variable set to
# the empty string is a value, not "unset": it is refused rather than
# silently replaced by the default.
#
#   env_int NAME DEFAULT MIN MAX       an integer in [MIN, MAX] (digits only: no sign, no leading 0)
#   env_ints NAME DEFAULT MIN MAX      a comma list of such integers: non-empty, no empty item, no repeats
#   env_number NAME DEFAULT LOW HIGH   a decimal number (5e-6, 0.001) in (LOW, HIGH]
#   env_names NAME DEFAULT KNOWN RE... a comma list, empty allowed, of names each matching one of the
#                                      extended regular expressions RE (whole name), no repeats; KNOWN
#                                      describes them in the message
#   env_text NAME DEFAULT              any non-empty text (a path)
#   env_file NAME DEFAULT              an existing regular file
# Each sets NAME (to DEFAULT when NAME is unset). A DEFAULT of "" makes NAME
# required (env_names: an empty list). env_max LIST prints a list's largest
# integer; env_fail MESSAGE refuses with the launcher's name, for the checks
# that relate several variables.

env_fail() {
    echo "$(basename "$0" .sh): $*" >&2
    exit 1
}

# NAME DEFAULT EXPECTED: the value NAME holds, or DEFAULT when unset, in env_value
env_get() {
    if [ -z "${!1+set}" ]; then
        if [ -z "$2" ]; then env_fail "$1 is not set; expected $3"; fi
        env_value=$2
    else
        env_value=${!1}
        if [ -z "$env_value" ]; then env_fail "$1 is empty; expected $3${2:+ (unset it for the default, $2)}"; fi
    fi
}

# VALUE MIN MAX: succeeds when VALUE is an integer in [MIN, MAX]; at most 18
# digits, so that the comparison (and a launcher's arithmetic) cannot wrap
env_int_in() {
    [[ $1 =~ ^(0|[1-9][0-9]{0,17})$ ]] && [ "$1" -ge "$2" ] && [ "$1" -le "$3" ]
}

env_int() { # NAME DEFAULT MIN MAX
    env_get "$1" "$2" "an integer in [$3, $4]"
    if ! env_int_in "$env_value" "$3" "$4"; then env_fail "$1 is '$env_value', not an integer in [$3, $4]"; fi
    printf -v "$1" '%s' "$env_value"
}

# NAME VALUE EXPECTED CHECK...: each item of the comma list VALUE passes
# CHECK ITEM (a command) and appears once; an empty item is refused
env_each() {
    local name=$1 value=$2 expected=$3 rest item seen=,
    shift 3
    rest=$value,
    while [ -n "$rest" ]; do
        item=${rest%%,*}
        rest=${rest#*,}
        if [ -z "$item" ]; then env_fail "$name is '$value', which holds an empty item; expected $expected"; fi
        if ! "$@" "$item"; then env_fail "$name holds '$item'; expected $expected"; fi
        if [[ $seen == *",$item,"* ]]; then env_fail "$name lists '$item' twice"; fi
        seen+=$item,
    done
}

env_ints() { # NAME DEFAULT MIN MAX
    local expected="a comma list of integers in [$3, $4]"
    env_get "$1" "$2" "$expected"
    env_each "$1" "$env_value" "$expected" env_int_between "$3" "$4"
    printf -v "$1" '%s' "$env_value"
}
env_int_between() { env_int_in "$3" "$1" "$2"; } # MIN MAX VALUE, for env_each

env_number() { # NAME DEFAULT LOW HIGH
    local expected="a number in ($3, $4]"
    env_get "$1" "$2" "$expected"
    if ! [[ $env_value =~ ^([0-9]{1,30}(\.[0-9]{0,30})?|\.[0-9]{1,30})([eE][-+]?[0-9]{1,3})?$ ]] ||
        ! awk -v v="$env_value" -v lo="$3" -v hi="$4" 'BEGIN { exit !(v + 0 > lo + 0 && v + 0 <= hi + 0) }'; then
        env_fail "$1 is '$env_value', not $expected"
    fi
    printf -v "$1" '%s' "$env_value"
}

env_names() { # NAME DEFAULT KNOWN RE...
    local name=$1 value=$2 known=$3
    shift 3
    if [ -n "${!name+set}" ]; then value=${!name}; fi
    if [ -n "$value" ]; then env_each "$name" "$value" "a comma list of $known" env_name_matches "$@"; fi
    printf -v "$name" '%s' "$value"
}
env_name_matches() { # RE... NAME, for env_each
    local re name=${!#}
    for re in "${@:1:$#-1}"; do
        if [[ $name =~ ^($re)$ ]]; then return 0; fi
    done
    return 1
}

env_text() { # NAME DEFAULT
    env_get "$1" "$2" "a non-empty value"
    printf -v "$1" '%s' "$env_value"
}

env_file() { # NAME DEFAULT
    env_get "$1" "$2" "a file"
    if [ ! -f "$env_value" ]; then env_fail "$1 is '$env_value', which is not a file"; fi
    printf -v "$1" '%s' "$env_value"
}

env_max() { # LIST: the largest of a comma list of integers (already checked)
    local item max=0
    for item in ${1//,/ }; do
        if [ "$item" -gt "$max" ]; then max=$item; fi
    done
    echo "$max"
}
