/**
 * A silent AAC-LC raw frame, built from the bitstream syntax (ISO 14496-3 §4.4.2): one
 * single_channel_element (mono) or channel_pair_element (stereo) with max_sfb = 0, so every
 * spectral coefficient is zero whatever the sample rate, then ID_END. Used in place of the
 * audio of a muted push: the decoder gets valid frames of the stream's own configuration.
 */
import { NotImplementedError } from "../../core/errors.ts";
import { parseAsc } from "../codecs/aac.ts";

/** AAC-LC audio object type. */
const aacLcObjectType = 2;
const idSce = 0;
const idCpe = 1;
const idEnd = 7;

class BitWriter {
  #bytes: number[] = [];
  #bits = 0;
  #acc = 0;

  write(value: number, count: number): void {
    for (let i = count - 1; i >= 0; i--) {
      this.#acc = (this.#acc << 1) | ((value >> i) & 1);
      if (++this.#bits === 8) {
        this.#bytes.push(this.#acc);
        this.#acc = 0;
        this.#bits = 0;
      }
    }
  }

  finish(): Uint8Array {
    if (this.#bits > 0) this.write(0, 8 - this.#bits);
    return Uint8Array.from(this.#bytes);
  }
}

/** ics_info of a long window with no scale factor bands. */
function writeIcsInfo(w: BitWriter): void {
  w.write(0, 1); // ics_reserved_bit
  w.write(0, 2); // window_sequence: ONLY_LONG_SEQUENCE
  w.write(0, 1); // window_shape
  w.write(0, 6); // max_sfb
  w.write(0, 1); // predictor_data_present
}

/** individual_channel_stream with nothing coded; ics_info only when the window is not shared. */
function writeSilentChannel(w: BitWriter, withIcsInfo: boolean): void {
  w.write(0, 8); // global_gain: irrelevant, no band is coded
  if (withIcsInfo) writeIcsInfo(w);
  w.write(0, 1); // pulse_data_present
  w.write(0, 1); // tns_data_present
  w.write(0, 1); // gain_control_data_present
}

/**
 * One silent raw AAC frame (1024 samples) for the AudioSpecificConfig `asc`; configurations
 * other than AAC-LC mono or stereo are a NotImplementedError naming `operation`.
 */
export function silentAacFrame(asc: Uint8Array, operation: string): Uint8Array {
  const config = parseAsc(asc);
  if (config.objectType !== aacLcObjectType || config.extensionSampleRate !== undefined) {
    throw new NotImplementedError(operation, "silence is built for AAC-LC audio only");
  }
  const w = new BitWriter();
  if (config.channelConfig === 1) {
    w.write(idSce, 3);
    w.write(0, 4); // element_instance_tag
    writeSilentChannel(w, true);
  } else if (config.channelConfig === 2) {
    w.write(idCpe, 3);
    w.write(0, 4);
    w.write(1, 1); // common_window
    writeIcsInfo(w);
    w.write(0, 2); // ms_mask_present
    writeSilentChannel(w, false);
    writeSilentChannel(w, false);
  } else {
    throw new NotImplementedError(operation, "silence is built for mono and stereo AAC only");
  }
  w.write(idEnd, 3);
  return w.finish();
}
