// A Kafka Streams application in a KIP-1071 streams group (group.protocol=streams): reads <in>, upper-cases each
// value, writes <in>-out. Run from source (tests/kafka_scenario.streams_app): java -cp "<kafka libs>/*:<streams
// libs>/*" WordApp.java <bootstrap> <application.id> <in> [sleep ms per record] [state dir, or -] [hang after N].
// Commits every 500 ms; prints "processed N" as it goes, and runs until it is stopped (SIGKILL leaves its group and
// lag behind). With "hang after N", its stream thread blocks in the N-th record for good ("hung"): it commits no
// more, and its member stays until max.poll.interval.ms.
import java.nio.file.Files;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;

public class WordApp {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String appId = args[1];
        String input = args[2];
        long sleepMs = args.length > 3 ? Long.parseLong(args[3]) : 0;
        String stateDir = args.length > 4 && !args[4].equals("-") ? args[4] : Files.createTempDirectory("wordapp-state").toString();
        long hangAfter = args.length > 5 ? Long.parseLong(args[5]) : 0;
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, "streams");
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 500);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.consumerPrefix("max.poll.records"), 10);
        props.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        AtomicLong processed = new AtomicLong();
        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream(input).mapValues(v -> {
            if (sleepMs > 0) {
                try { Thread.sleep(sleepMs); } catch (InterruptedException e) { Thread.currentThread().interrupt(); }
            }
            long n = processed.incrementAndGet();
            if (hangAfter > 0 && n >= hangAfter) {
                System.out.println("hung"); System.out.flush();
                try { Thread.sleep(Long.MAX_VALUE); } catch (InterruptedException e) { Thread.currentThread().interrupt(); }
            }
            if (n % 50 == 0) { System.out.println("processed " + n); System.out.flush(); }
            return v == null ? null : v.toUpperCase();
        }).to(input + "-out");
        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        streams.setStateListener((now, before) -> { System.out.println("state " + before + " -> " + now); System.out.flush(); });
        Runtime.getRuntime().addShutdownHook(new Thread(streams::close));
        streams.start();
        Thread.currentThread().join();
    }
}
