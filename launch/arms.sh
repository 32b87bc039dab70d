# Sourced by launch/realmodel.sh and launch/demo.sh: the CPT arms of ARMS.
# An arm is a CPT run that differs from the others only in the attention it
# trains under (the same steps, tokens, data order and schedule):
#   mask                 the paper's RefreshKV mask (train mask=1)
#   causal               plain causal attention (mask=0): the control
#   evict                the mask holding the eval cache's budget (mask_evict=1)
#   restride<r>          the mask re-selecting every r positions (mask_restride=r)
#   evict+restride<r>    both

# arm_sets NAME: the train options of an arm (whole --set words); nothing for an unknown name
arm_sets() {
    local r=${1##*restride}
    case "$1" in
        mask) echo "--set mask=1" ;;
        causal) echo "--set mask=0" ;;
        evict) echo "--set mask=1 --set mask_evict=1" ;;
        restride*) [[ "$r" =~ ^[1-9][0-9]*$ ]] && echo "--set mask=1 --set mask_restride=$r" ;;
        evict+restride*) [[ "$r" =~ ^[1-9][0-9]*$ ]] && echo "--set mask=1 --set mask_evict=1 --set mask_restride=$r" ;;
    esac
    return 0
}

# check_arms PREFIX ARMS: exits with "PREFIX: ARMS ..." naming the variable unless every arm is known
check_arms() {
    local arm
    [ -n "${2//,/}" ] || { echo "$1: ARMS is empty; e.g. ARMS=mask,causal" >&2; exit 1; }
    for arm in ${2//,/ }; do
        [ -n "$(arm_sets "$arm")" ] ||
            { echo "$1: ARMS holds '$arm'; known: mask, causal, evict, restride<r>, evict+restride<r>" >&2; exit 1; }
    done
}
